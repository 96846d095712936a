"""gRPC method handlers built from a service's descriptor, with tolerant request parsing.

`service_handler(descriptor, servicer)` maps each method of the service that the servicer
defines to its coroutine of the same name (several servicers may share a service, each serving
its own methods: `served` says which); request bytes that do not parse reach it as `Malformed` (answered
INVALID_ARGUMENT), never as an exception in gRPC's deserializer (INTERNAL and a traceback). A
servicer's `RAW_REQUESTS` methods get their bytes unparsed (`Wire`), and parse them off the loop.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import message_factory
from google.protobuf.descriptor import ServiceDescriptor

from meshplan.server.requests import raw, request_cap, tolerant

_KINDS = {
    (False, False): grpc.unary_unary_rpc_method_handler,
    (False, True): grpc.unary_stream_rpc_method_handler,
    (True, False): grpc.stream_unary_rpc_method_handler,
    (True, True): grpc.stream_stream_rpc_method_handler,
}


def service_handler(
    service: ServiceDescriptor, servicer: Any, max_request_bytes: int
) -> grpc.GenericRpcHandler:
    """One generic handler serving the methods of `service` that `servicer` defines with its
    coroutines; requests are bounded by server.requests.request_cap."""
    methods = {}
    unparsed = getattr(servicer, "RAW_REQUESTS", frozenset())  # parsed by the method, off the loop
    for method in service.methods:
        if method.name not in served(service, servicer):
            continue
        request_cls = message_factory.GetMessageClass(method.input_type)
        response_cls = message_factory.GetMessageClass(method.output_type)
        kind = _KINDS[(method.client_streaming, method.server_streaming)]
        methods[method.name] = kind(
            getattr(servicer, method.name),
            request_deserializer=(raw if method.name in unparsed else tolerant)(
                request_cls, request_cap(request_cls, max_request_bytes)
            ),
            response_serializer=response_cls.SerializeToString,
        )
    return grpc.method_handlers_generic_handler(service.full_name, methods)


def served(service: ServiceDescriptor, servicer: Any) -> set[str]:
    """The names of the methods of `service` that `servicer` defines."""
    return {m.name for m in service.methods if callable(getattr(servicer, m.name, None))}
