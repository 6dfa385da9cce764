%% The exchange type of a MaaS topic address (`x-maas-topic`): RabbitMQ's topic exchange, plus
%% two things RabbitMQ 3.10's own cannot do (docs/storage.md, "The topic exchange type"):
%%
%% - A message without a routing key (an AMQP 1.0 message sent to `/exchange/T` without a
%%   subject) is routed as the empty key, so it reaches the topic's `#` bindings: its
%%   subscriptions and whole-topic receivers. The stock topic type crashes the sender's link
%%   (`function_clause` in `split_topic_key(undefined)`).
%% - An MQTT publish arrives from `amq.topic` with the key `T.<subtopic>` (MQTT topic
%%   `T/<subtopic>`); it is routed as `<subtopic>`, the key an AMQP receiver of `T/<subtopic>`
%%   binds (the MQTT topic `T` alone as the empty key).
%% - A message published to the topic itself (AMQP 1.0 `/exchange/T`, subject `<subtopic>`)
%%   is also published to `amq.topic` with the key `T.<subtopic>` (`T` without one), so MQTT
%%   subscribers of `T/<subtopic>` get it; the copy carries its AMQP 1.0 body as the MQTT
%%   payload (the bytes of a single data or string/binary amqp-value section) and a marker
%%   header that keeps it from coming back into the topic through the `amq.topic` binding.
%%   RabbitMQ cannot rewrite a delivery's key, so the copy is the only way to MQTT's topic.
%%
%% Everything else (bindings, the trie, deletion) is the stock topic type's.
-module(rabbit_exchange_type_maas_topic).

-include_lib("rabbit_common/include/rabbit.hrl").
-include_lib("rabbit_common/include/rabbit_framing.hrl").

-behaviour(rabbit_exchange_type).

-export([description/0, serialise_events/0, route/2, validate/1, validate_binding/2,
         create/2, delete/3, policy_changed/2, add_binding/3, remove_bindings/3,
         assert_args_equivalence/2, info/1, info/2]).

-define(TYPE, <<"x-maas-topic">>).
-define(MQTT_EXCHANGE, <<"amq.topic">>).
-define(COPY_HEADER, <<"x-maas-topic-copy">>).  % a copy for MQTT: not routed back into the topic

-rabbit_boot_step({?MODULE,
                   [{description, "exchange type x-maas-topic"},
                    {mfa, {rabbit_registry, register, [exchange, ?TYPE, ?MODULE]}},
                    {cleanup, {rabbit_registry, unregister, [exchange, ?TYPE]}},
                    {requires, rabbit_registry},
                    {enables, kernel_ready}]}).

-define(TOPIC, rabbit_exchange_type_topic).

description() ->
    [{description, <<"MaaS topic: topic routing, a missing key as the empty key, "
                     "MQTT subtopics as keys">>}].

serialise_events() -> ?TOPIC:serialise_events().

route(X = #exchange{name = XName = #resource{name = Name}},
      Delivery = #delivery{message = Msg = #basic_message{exchange_name = From,
                                                          routing_keys = Keys}}) ->
    case From of
        #resource{name = ?MQTT_EXCHANGE} ->
            case is_copy(Msg) of
                true -> [];  % this topic routed the original already
                false -> route_keys(X, Delivery, Msg, Name, From, Keys)
            end;
        XName ->
            copy_for_mqtt(XName, Name, Keys, Msg),
            route_keys(X, Delivery, Msg, Name, From, Keys);
        _ ->
            route_keys(X, Delivery, Msg, Name, From, Keys)
    end.

route_keys(X, Delivery, Msg, Name, From, Keys) ->
    Keys1 = lists:usort(lists:flatmap(fun (K) -> keys(Name, From, K) end, Keys)),
    lists:usort(?TOPIC:route(X, Delivery#delivery{
                                  message = Msg#basic_message{routing_keys = Keys1}})).

%% A message published to the topic, copied to amq.topic for MQTT subscribers (topics whose
%% name MQTT can write: no `.` or `/`; docs/storage.md). Never fails the original's routing.
copy_for_mqtt(#resource{virtual_host = VHost}, Name, [Key | _], Msg) ->
    case binary:match(Name, [<<".">>, <<"/">>]) of
        nomatch ->
            MqttKey = case Key of
                          undefined -> Name;
                          <<>> -> Name;
                          _ -> <<Name/binary, ".", Key/binary>>
                      end,
            try
                #content{payload_fragments_rev = Rev} = Msg#basic_message.content,
                Body = mqtt_payload(iolist_to_binary(lists:reverse(Rev))),
                Props = #'P_basic'{headers = [{?COPY_HEADER, bool, true},
                                              {<<"x-mqtt-publish-qos">>, byte, 1}],
                                   delivery_mode = 2},
                rabbit_basic:publish(rabbit_misc:r(VHost, exchange, ?MQTT_EXCHANGE),
                                     MqttKey, Props, Body)
            catch Class:Reason ->
                rabbit_log:warning("x-maas-topic: no MQTT copy of a message to ~ts: ~p:~p",
                                   [Name, Class, Reason])
            end;
        _ ->
            ok
    end;
copy_for_mqtt(_XName, _Name, [], _Msg) ->
    ok.

is_copy(#basic_message{content = Content}) ->
    #content{properties = #'P_basic'{headers = Headers}} =
        rabbit_binary_parser:ensure_content_decoded(Content),
    is_list(Headers) andalso lists:keymember(?COPY_HEADER, 1, Headers).

%% The MQTT payload of a body: an AMQP 1.0 message's body is stored as its encoded body
%% section; one data section or one string or binary amqp-value becomes its bytes. Anything
%% else (an AMQP 0-9-1 body, sequences, maps, several sections) goes as it is.
mqtt_payload(<<0, 16#53, Section, Rest/binary>>) when Section =:= 16#75; Section =:= 16#77 ->
    case Rest of
        <<Code, Size, Bytes:Size/binary>> when Code =:= 16#a0; Code =:= 16#a1 -> Bytes;
        <<Code, Size:32, Bytes:Size/binary>> when Code =:= 16#b0; Code =:= 16#b1 -> Bytes;
        _ -> <<0, 16#53, Section, Rest/binary>>
    end;
mqtt_payload(Body) ->
    Body.

%% The keys a delivery's key is routed with.
keys(_Name, _From, undefined) ->
    [<<>>];
keys(Name, #resource{name = ?MQTT_EXCHANGE}, Name) ->
    [<<>>];
keys(Name, #resource{name = ?MQTT_EXCHANGE}, Key) ->
    Size = byte_size(Name),
    case Key of
        <<Name:Size/binary, ".", Subtopic/binary>> -> [Subtopic];
        _ -> [Key]
    end;
keys(_Name, _From, Key) ->
    [Key].

validate(X) -> ?TOPIC:validate(X).
validate_binding(X, B) -> ?TOPIC:validate_binding(X, B).
create(Tx, X) -> ?TOPIC:create(Tx, X).
delete(Tx, X, Bs) -> ?TOPIC:delete(Tx, X, Bs).
policy_changed(X1, X2) -> ?TOPIC:policy_changed(X1, X2).
add_binding(Tx, X, B) -> ?TOPIC:add_binding(Tx, X, B).
remove_bindings(Tx, X, Bs) -> ?TOPIC:remove_bindings(Tx, X, Bs).
assert_args_equivalence(X, Args) -> ?TOPIC:assert_args_equivalence(X, Args).
info(X) -> ?TOPIC:info(X).
info(X, Items) -> ?TOPIC:info(X, Items).
