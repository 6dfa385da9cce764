"""The infra controller: runs each standard address space's routers, brokers and agent.

`manifests` turns a space into Kubernetes manifests (pure functions), `controller` reconciles
them through a small client interface (`kube.KubernetesClient` for a real cluster,
`fake.FakeKubernetes` in the tests), `drain` empties a broker before it is removed, and
`backend` picks `local` (processes on this machine) or `kubernetes` by setting.
"""
