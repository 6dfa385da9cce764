%% The exchange type of a MaaS topic address (`x-maas-topic`): RabbitMQ's topic exchange, plus
%% what RabbitMQ's own cannot do (docs/storage.md, "The topic exchange type"):
%%
%% - A message without a routing key (an AMQP 1.0 message sent to `/exchange/T` without a
%%   subject) is routed as the empty key, so it reaches the topic's `#` bindings: its
%%   subscriptions and whole-topic receivers. The stock topic type crashes the sender's link
%%   (`function_clause` in `split_topic_key(undefined)`). On 3.13 such a message fails the link
%%   before any exchange type sees it (mc_amqpl:message/3 takes a binary key only); 4.0's
%%   native AMQP 1.0 routes it as the empty key itself.
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
%%
%% One source for RabbitMQ 3.10 to 4.1, chosen at run time by what the broker calls:
%% - 3.10 to 3.12 call route/2 with a #delivery{} holding a #basic_message{}; the MQTT copy is
%%   published with rabbit_basic:publish/4.
%% - 3.13 and later call route/3 where a type exports it (rabbit_exchange:type_to_route_fun/1)
%%   with an `mc` message container, read and changed through the mc API; the copy is made with
%%   mc_amqpl:message/3 and rabbit_queue_type:publish_at_most_once/2.
%% - 3.10 and 3.11 call delete/3 (transaction, exchange, bindings), 3.12 and later delete/2
%%   (serial, exchange); both are exported and passed to the topic type's own.
%% The topic type keeps its trie in Mnesia; with Khepri as the metadata store (opt-in before
%% 4.2, the default of new 4.2 clusters, required in 4.3) RabbitMQ projects bindings only of
%% exchanges whose type is `topic`, so this type would route nothing there.
-module(rabbit_exchange_type_maas_topic).

-include_lib("rabbit_common/include/rabbit.hrl").
-include_lib("rabbit_common/include/rabbit_framing.hrl").

-behaviour(rabbit_exchange_type).

-export([description/0, serialise_events/0, route/2, route/3, validate/1, validate_binding/2,
         create/2, delete/2, delete/3, policy_changed/2, add_binding/3, remove_bindings/3,
         assert_args_equivalence/2, info/1, info/2]).

-define(TYPE, <<"x-maas-topic">>).
-define(MQTT_EXCHANGE, <<"amq.topic">>).
-define(COPY_HEADER, <<"x-maas-topic-copy">>).  % a copy for MQTT: not routed back into the topic
%% mc's annotation of a message's routing keys (?ANN_ROUTING_KEYS of rabbit/include/mc.hrl,
%% `rk` in 3.13 to 4.3; that header is not there before 3.13, so it is not included).
-define(MC_ROUTING_KEYS, rk).

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

%% --- RabbitMQ 3.10 to 3.12: route/2 with a #delivery{} -------------------------------------

route(X = #exchange{name = XName = #resource{name = Name}},
      Delivery = #delivery{message = Msg = #basic_message{exchange_name = From,
                                                          routing_keys = Keys}}) ->
    case From of
        #resource{name = ?MQTT_EXCHANGE} ->
            case is_copy(Msg) of
                true -> [];  % this topic routed the original already
                false -> route_keys(X, Delivery, Msg, Name, ?MQTT_EXCHANGE, Keys)
            end;
        XName ->
            copy_for_mqtt(XName, Name, Keys, Msg),
            route_keys(X, Delivery, Msg, Name, Name, Keys);
        #resource{name = FromName} ->
            route_keys(X, Delivery, Msg, Name, FromName, Keys)
    end.

route_keys(X, Delivery, Msg, Name, From, Keys) ->
    Keys1 = route_keys(Name, From, Keys),
    lists:usort(?TOPIC:route(X, Delivery#delivery{
                                  message = Msg#basic_message{routing_keys = Keys1}})).

copy_for_mqtt(XName, Name, Keys, Msg) ->
    publish_copy(Name, Keys,
                 fun () ->
                         #content{payload_fragments_rev = Rev} = Msg#basic_message.content,
                         Rev
                 end,
                 fun (MqttX, MqttKey, Body) ->
                         rabbit_basic:publish(MqttX, MqttKey, copy_props(), Body)
                 end, XName).

is_copy(#basic_message{content = Content}) ->
    #content{properties = #'P_basic'{headers = Headers}} =
        rabbit_binary_parser:ensure_content_decoded(Content),
    is_list(Headers) andalso lists:keymember(?COPY_HEADER, 1, Headers).

%% --- RabbitMQ 3.13 and later: route/3 with an mc message container --------------------------
%% mc:exchange/1 is the name (a binary) of the exchange the message was published to, the
%% same through exchange-to-exchange bindings; mc also reads a #basic_message{} (3.13 before
%% its message_containers feature flag is enabled).

route(X = #exchange{name = XName = #resource{name = Name}}, Msg, Opts) ->
    Keys = mc:routing_keys(Msg),
    case mc:exchange(Msg) of
        ?MQTT_EXCHANGE ->
            case mc:x_header(?COPY_HEADER, Msg) of
                undefined -> route_keys_mc(X, Msg, Opts, Name, ?MQTT_EXCHANGE, Keys);
                _ -> []  % this topic routed the original already
            end;
        Name ->
            copy_for_mqtt_mc(XName, Name, Keys, Msg),
            route_keys_mc(X, Msg, Opts, Name, Name, Keys);
        From ->
            route_keys_mc(X, Msg, Opts, Name, From, Keys)
    end.

route_keys_mc(X, Msg, Opts, Name, From, Keys) ->
    Keys1 = route_keys(Name, From, Keys),
    lists:usort(?TOPIC:route(X, mc:set_annotation(?MC_ROUTING_KEYS, Keys1, Msg), Opts)).

copy_for_mqtt_mc(XName, Name, Keys, Msg) ->
    publish_copy(Name, Keys,
                 fun () ->
                         #content{payload_fragments_rev = Rev} =
                             mc:protocol_state(mc:convert(mc_amqpl, Msg)),
                         Rev
                 end,
                 fun (MqttX, MqttKey, Body) ->
                         {ok, Copy} = mc_amqpl:message(
                                        MqttX, MqttKey,
                                        rabbit_basic:build_content(copy_props(), Body)),
                         rabbit_queue_type:publish_at_most_once(MqttX, Copy)
                 end, XName).

%% --- both ---------------------------------------------------------------------------------

%% A message published to the topic, copied to amq.topic for MQTT subscribers (topics whose
%% name MQTT can write: no `.` or `/`; docs/storage.md). Never fails the original's routing.
publish_copy(Name, [Key | _], Payload, Publish, #resource{virtual_host = VHost}) ->
    case binary:match(Name, [<<".">>, <<"/">>]) of
        nomatch ->
            MqttKey = case Key of
                          undefined -> Name;
                          <<>> -> Name;
                          _ -> <<Name/binary, ".", Key/binary>>
                      end,
            try
                Body = mqtt_payload(iolist_to_binary(fragments(Payload()))),
                Publish(rabbit_misc:r(VHost, exchange, ?MQTT_EXCHANGE), MqttKey, Body)
            catch Class:Reason ->
                rabbit_log:warning("x-maas-topic: no MQTT copy of a message to ~ts: ~p:~p",
                                   [Name, Class, Reason])
            end,
            ok;
        _ ->
            ok
    end;
publish_copy(_Name, [], _Payload, _Publish, _XName) ->
    ok.

%% The copy's properties: MQTT's QoS 1, from the header (3.10 to 3.12's MQTT plugin) or the
%% delivery mode (3.13's).
copy_props() ->
    #'P_basic'{headers = [{?COPY_HEADER, bool, true}, {<<"x-mqtt-publish-qos">>, byte, 1}],
               delivery_mode = 2}.

fragments(Rev) when is_list(Rev) -> lists:reverse(Rev);
fragments(Bin) when is_binary(Bin) -> Bin.

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

%% The keys a delivery is routed with; From is the name of the exchange it was published to.
route_keys(Name, From, Keys) ->
    lists:usort(lists:flatmap(fun (K) -> keys(Name, From, K) end, Keys)).

keys(_Name, _From, undefined) ->
    [<<>>];
keys(Name, ?MQTT_EXCHANGE, Name) ->
    [<<>>];
keys(Name, ?MQTT_EXCHANGE, Key) ->
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
delete(Serial, X) -> ?TOPIC:delete(Serial, X).           % 3.12 and later
delete(Tx, X, Bs) -> ?TOPIC:delete(Tx, X, Bs).           % 3.10, 3.11
policy_changed(X1, X2) -> ?TOPIC:policy_changed(X1, X2).
add_binding(Tx, X, B) -> ?TOPIC:add_binding(Tx, X, B).
remove_bindings(Tx, X, Bs) -> ?TOPIC:remove_bindings(Tx, X, Bs).
assert_args_equivalence(X, Args) -> ?TOPIC:assert_args_equivalence(X, Args).
info(X) -> ?TOPIC:info(X).
info(X, Items) -> ?TOPIC:info(X, Items).
