"""What every service process runs on: settings parsed before heavy imports (`config`),
`serve()` and the lifecycle protocol (`service`), gRPC servers, clients and interceptors
(`rpc`), the fleet token check every API runs (`auth`), logging with request ids, the
metrics endpoint, the health monitor, the container healthcheck, and riding out a
dependency's outage within a budget (`outage`). Imports only `artfleet.contracts`.
"""
