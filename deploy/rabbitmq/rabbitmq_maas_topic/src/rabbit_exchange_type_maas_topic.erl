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
%%
%% Everything else (bindings, the trie, deletion) is the stock topic type's: this module only
%% changes the keys a delivery is routed with.
-module(rabbit_exchange_type_maas_topic).

-include_lib("rabbit_common/include/rabbit.hrl").

-behaviour(rabbit_exchange_type).

-export([description/0, serialise_events/0, route/2, validate/1, validate_binding/2,
         create/2, delete/3, policy_changed/2, add_binding/3, remove_bindings/3,
         assert_args_equivalence/2, info/1, info/2]).

-define(TYPE, <<"x-maas-topic">>).
-define(MQTT_EXCHANGE, <<"amq.topic">>).

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

route(X = #exchange{name = #resource{name = Name}},
      Delivery = #delivery{message = Msg = #basic_message{exchange_name = From,
                                                          routing_keys = Keys}}) ->
    Keys1 = lists:usort(lists:flatmap(fun (K) -> keys(Name, From, K) end, Keys)),
    lists:usort(?TOPIC:route(X, Delivery#delivery{
                                  message = Msg#basic_message{routing_keys = Keys1}})).

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
