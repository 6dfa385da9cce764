{application, rabbitmq_maas_topic, [
    {description, "MaaS topic exchange type (x-maas-topic)"},
    {vsn, "1.0.0"},
    {modules, [rabbit_exchange_type_maas_topic]},
    {registered, []},
    {applications, [kernel, stdlib, rabbit_common, rabbit]},
    {env, []}
]}.
