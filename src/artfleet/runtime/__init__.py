"""What every service process runs on: settings parsed before heavy imports (`config`),
`serve()` and the lifecycle protocol (`service`), gRPC servers, clients and interceptors
(`rpc`), logging with request ids, the metrics endpoint, the health monitor and the
container healthcheck. Imports only `artfleet.contracts`.
"""
