"""JSON over HTTP beside the gRPC port, and the planner page, on `--http-port`.

Every RPC of meshplan.v1.Planner answers at `POST /v1/<method-in-kebab-case>` (`GET
/v1/catalog` for ListCatalog), bodies in the protos' JSON mapping. A call is handed to the very
servicer coroutine the gRPC server runs (server.servicer, server.scheduler), with an adapter in
place of grpc's ServicerContext: the same admission, validation, fair solver slots, deadlines,
log line and metrics; failures come back as HTTP statuses with the same field violations.

- site: the aiohttp application on the gRPC server's event loop, its socket and TLS
- calls: the context adapter, the timeout, tokens, and errors as HTTP answers
- messages: JSON <-> proto (the names `--request FILE` takes; short enum names accepted)
- page: the page's static files and its helpers (export, Hugging Face config.json, metadata)
- extras: the functions the page needs from outside server/ (installed by `meshplan serve`)
"""
