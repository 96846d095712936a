"""TLS, mTLS, certificate reload and bearer tokens, on real servers on loopback (certificates
made for each test by trustme)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme
from conftest import Pki, _leaf, _write
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from test_grpc_support import LOOPBACK, no_plan, running_server, small_request

from meshplan.client import AsyncPlannerClient, PlannerClient, PlannerError, UnavailableError
from meshplan.client.security import Security, is_local
from meshplan.solver.results import PlanResult
from meshplan.solver.schema import PlanRequest
from meshplan.tools.cli.main import main as cli_main

TOKENS = ("alpha-token-0123456789", "bravo-token-0123456789")


@pytest.fixture()
def token_file(tmp_path: Path) -> Path:
    return _write(
        tmp_path / "tokens", ("# meshplan tokens\n" + "\n".join(TOKENS) + "\n\n").encode()
    )


@pytest.fixture()
def clean_env() -> Iterator[None]:
    """The CLI exports its connection flags to the environment: restore it after."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


class CountingPlan:
    """A fake solve that counts its calls (to prove a refused call did no work)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        self.calls += 1
        return no_plan("INFEASIBLE")


def _target(port: int) -> str:
    return f"localhost:{port}"


# --- TLS and mTLS -----------------------------------------------------------------------------


def test_tls_accepts_the_right_ca_and_refuses_a_wrong_one_or_plaintext(pki: Pki) -> None:
    fake = CountingPlan()
    with running_server(plan_fn=fake, tls_cert=str(pki.cert), tls_key=str(pki.key)) as (port, _):
        with PlannerClient(_target(port), tls_ca=str(pki.ca)) as client:
            assert client.plan(small_request(), timeout=10).status.value == "INFEASIBLE"
            assert client.health(timeout=5) == "SERVING"
        with (
            PlannerClient(_target(port), tls_ca=str(pki.other_ca), max_attempts=1) as wrong,
            pytest.raises(UnavailableError),
        ):
            wrong.plan(small_request(), timeout=5)
        with PlannerClient(_target(port), max_attempts=1) as plain, pytest.raises(UnavailableError):
            plain.plan(small_request(), timeout=5)
    assert fake.calls == 1


def test_mtls_needs_a_client_certificate_from_the_client_ca(pki: Pki) -> None:
    settings = {"tls_cert": str(pki.cert), "tls_key": str(pki.key), "tls_client_ca": str(pki.ca)}
    with running_server(plan_fn=CountingPlan(), **settings) as (port, _):
        good = {
            "tls_ca": str(pki.ca),
            "tls_cert": str(pki.client_cert),
            "tls_key": str(pki.client_key),
        }
        with PlannerClient(_target(port), **good) as client:
            assert client.plan(small_request(), timeout=10).explanation is not None
        with (
            PlannerClient(_target(port), tls_ca=str(pki.ca), max_attempts=1) as anonymous,
            pytest.raises(UnavailableError),
        ):
            anonymous.plan(small_request(), timeout=5)
        intruder = {
            "tls_ca": str(pki.ca),
            "tls_cert": str(pki.other_client_cert),
            "tls_key": str(pki.other_client_key),
        }
        with (
            PlannerClient(_target(port), max_attempts=1, **intruder) as client,
            pytest.raises(UnavailableError),
        ):
            client.plan(small_request(), timeout=5)


def test_certificates_are_reloaded_without_dropping_calls(pki: Pki, tmp_path: Path) -> None:
    release = threading.Event()

    def slow(req: PlanRequest, stop_event: threading.Event | None = None) -> PlanResult:
        release.wait(20)
        return no_plan("INFEASIBLE")

    settings = {"tls_cert": str(pki.cert), "tls_key": str(pki.key), "max_solves_per_caller": 2}
    new_ca = trustme.CA()
    with running_server(plan_fn=slow, max_concurrent_solves=2, **settings) as (port, server):
        old_client = PlannerClient(_target(port), tls_ca=str(pki.ca))
        answers: list[object] = []
        caller = threading.Thread(
            target=lambda: answers.append(old_client.plan(small_request(), timeout=30))
        )
        caller.start()
        time.sleep(0.3)  # the call is in flight on a connection of the old certificate
        new_cert, new_key = _leaf(new_ca, tmp_path, "rotated", "localhost", "127.0.0.1")
        pki.cert.write_bytes(new_cert.read_bytes())  # rotated in place, as a secret mount does
        pki.key.write_bytes(new_key.read_bytes())
        new_ca_file = _write(tmp_path / "new-ca.pem", new_ca.cert_pem.bytes())
        with PlannerClient(_target(port), tls_ca=str(new_ca_file)) as fresh:
            assert fresh.health(timeout=5) == "SERVING"  # a new handshake: the new certificate
        release.set()
        caller.join(20)
        assert len(answers) == 1 and isinstance(answers[0], PlanResult)  # not dropped
        old_client.close()
        server.reload()  # SIGHUP: read again even though nothing changed
        with PlannerClient(_target(port), tls_ca=str(new_ca_file)) as again:
            assert again.health(timeout=5) == "SERVING"


def test_an_unreadable_certificate_stops_the_server_from_starting(tmp_path: Path, pki: Pki) -> None:
    from meshplan.server.app import create_server
    from meshplan.server.settings import Settings

    bad = _write(tmp_path / "bad.pem", b"not a certificate")
    with pytest.raises(OSError):
        create_server(Settings(host=LOOPBACK, port=0, tls_cert=str(bad), tls_key=str(pki.key)))


def test_an_expired_or_expiring_server_certificate_is_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import datetime

    import trustme

    from meshplan.server.tls import warn_if_expiring

    ca = trustme.CA()
    past = datetime.datetime(2020, 1, 1, tzinfo=datetime.UTC)
    leaf = ca.issue_cert("localhost", not_before=past, not_after=past + datetime.timedelta(days=1))
    path = _write(tmp_path / "old.pem", leaf.cert_chain_pems[0].bytes())
    with caplog.at_level("WARNING", logger="meshplan.server"):
        end = warn_if_expiring(str(path))
    assert end is not None and end < time.time()
    assert "expired" in caplog.text and "old.pem" in caplog.text
    caplog.clear()
    fresh = _write(tmp_path / "new.pem", ca.issue_cert("localhost").cert_chain_pems[0].bytes())
    with caplog.at_level("WARNING", logger="meshplan.server"):
        assert warn_if_expiring(str(fresh), now=time.time()) is not None
    assert caplog.text == ""  # trustme's default lasts years: nothing to say


# --- tokens -----------------------------------------------------------------------------------


def test_tokens_accepted_missing_wrong_and_nothing_parsed_without_one(token_file: Path) -> None:
    fake = CountingPlan()
    with (
        running_server(plan_fn=fake, auth_token_file=str(token_file)) as (port, _),
        grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
    ):
        target = f"{LOOPBACK}:{port}"
        for token in TOKENS:
            with PlannerClient(target, token=token) as client:
                assert client.plan(small_request(), timeout=10).status.value == "INFEASIBLE"
        for token, word in ((None, "required"), ("wrong-token-0123456789", "not valid")):
            with PlannerClient(target, token=token) as client, pytest.raises(PlannerError) as err:
                client.plan(small_request(), timeout=10)
            assert err.value.code == grpc.StatusCode.UNAUTHENTICATED and word in err.value.message
        raw = channel.unary_unary("/meshplan.v1.Planner/Plan")
        with pytest.raises(grpc.RpcError) as err:  # garbage without a token: refused, not parsed
            raw(b"\xff\xff garbage", timeout=5)
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        stream = channel.unary_stream("/meshplan.v1.Planner/PlanBatch")
        with pytest.raises(grpc.RpcError) as err:
            list(stream(b"", timeout=5))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(), timeout=5
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING  # probes need no token
    assert fake.calls == len(TOKENS)


def test_tokens_rotate_when_the_file_changes(token_file: Path) -> None:
    with running_server(plan_fn=CountingPlan(), auth_token_file=str(token_file)) as (port, _):
        target = f"{LOOPBACK}:{port}"
        token_file.write_text("charlie-token-0123456789\n")
        time.sleep(0.01)
        with PlannerClient(target, token=TOKENS[0]) as old, pytest.raises(PlannerError) as err:
            old.plan(small_request(), timeout=10)
        assert err.value.code == grpc.StatusCode.UNAUTHENTICATED
        with PlannerClient(target, token="charlie-token-0123456789") as new:
            assert new.plan(small_request(), timeout=10).explanation is not None


def test_reflection_follows_its_flag(token_file: Path) -> None:
    for enabled in (True, False):
        with (
            running_server(reflection=enabled, auth_token_file=str(token_file)) as (port, _),
            grpc.insecure_channel(f"{LOOPBACK}:{port}") as channel,
        ):
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            call = stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
            if enabled:
                names = {s.name for s in next(call).list_services_response.service}
                assert "meshplan.v1.Planner" in names
            else:
                with pytest.raises(grpc.RpcError) as err:
                    next(call)
                assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_tls_and_a_token_with_the_async_client(pki: Pki, token_file: Path) -> None:
    settings = {
        "tls_cert": str(pki.cert),
        "tls_key": str(pki.key),
        "auth_token_file": str(token_file),
    }

    async def calls(port: int) -> tuple[str, int]:
        async with AsyncPlannerClient(_target(port), tls_ca=str(pki.ca), token=TOKENS[1]) as c:
            result = await c.plan(small_request(), timeout=10)
            items = [i async for i in c.plan_batch([small_request()] * 2, timeout=10)]
            return result.status.value, len(items)

    with running_server(plan_fn=CountingPlan(), **settings) as (port, _):
        assert asyncio.run(calls(port)) == ("INFEASIBLE", 2)


def test_a_token_is_never_sent_in_plaintext_to_another_machine(pki: Pki) -> None:
    remote = "10.20.30.40:50051"  # constructed only: no call is made
    with pytest.raises(ValueError, match="plaintext"):
        PlannerClient(remote, token=TOKENS[0])
    with pytest.raises(ValueError, match="plaintext"):
        AsyncPlannerClient(["10.20.30.40:1", "127.0.0.1:2"], token=TOKENS[0])
    PlannerClient(remote, token=TOKENS[0], allow_insecure_token=True).close()
    PlannerClient(remote, token=TOKENS[0], tls_ca=str(pki.ca)).close()
    PlannerClient(remote).close()  # no token: nothing to protect
    for local in (
        "localhost:1",
        "127.0.0.1:1",
        "[::1]:1",
        "ipv4:127.0.0.1:1,127.0.0.2:2",
        "unix:/tmp/s",
    ):
        assert is_local(local), local
    for far in (
        "10.0.0.1:1",
        "dns:///planner.svc:1",
        "example.com:443",
        "ipv4:127.0.0.1:1,10.0.0.1:2",
    ):
        assert not is_local(far), far


def test_the_environment_supplies_the_defaults(pki: Pki, tmp_path: Path) -> None:
    token = _write(tmp_path / "token", b"# mine\n" + TOKENS[0].encode() + b"\n")
    env = {"MESHPLAN_TOKEN_FILE": str(token), "MESHPLAN_TLS_CA": str(pki.ca)}
    sec = Security.resolve(environ=env)
    assert sec.token == TOKENS[0] and sec.tls and sec.tls_ca == str(pki.ca)
    assert (
        Security.resolve(token="given-token-0123456789", environ=env).token
        == "given-token-0123456789"
    )
    assert Security.resolve(environ={"MESHPLAN_TOKEN": "x" * 20}).token == "x" * 20
    with pytest.raises(ValueError, match="certificate and its key"):
        Security.resolve(tls_cert=str(pki.client_cert), environ={})


# --- the command line -------------------------------------------------------------------------


def test_cli_connects_with_tls_and_a_token_file(
    pki: Pki, token_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    mine = _write(tmp_path / "mine", TOKENS[0].encode() + b"\n")
    settings = {
        "tls_cert": str(pki.cert),
        "tls_key": str(pki.key),
        "auth_token_file": str(token_file),
    }
    with running_server(plan_fn=CountingPlan(), **settings) as (port, _):
        server = f"localhost:{port}"
        flags = ["--tls-ca", str(pki.ca), "--token-file", str(mine)]
        plan = ["plan", "--server", server, "--model", "llama3-8b", "--gpus", "8", "--json"]
        assert cli_main([*plan, *flags]) == 3  # the fake's answer: infeasible, the CLI's exit 3
        assert '"status": "INFEASIBLE"' in capsys.readouterr().out
        requests = _write(
            tmp_path / "reqs.json", ("[" + small_request().model_dump_json() + "]").encode()
        )
        batch = ["batch", "--server", f"{server},{server}", "--request", str(requests)]
        assert cli_main([*batch, *flags]) == 0  # a repeated target is accepted
        assert '"index": 0' in capsys.readouterr().out
        os.environ.pop("MESHPLAN_TOKEN_FILE")
        assert cli_main([*plan, "--tls-ca", str(pki.ca)]) == 1  # no token: UNAUTHENTICATED
        assert "UNAUTHENTICATED" in capsys.readouterr().err


def test_cli_refuses_a_token_in_plaintext_to_another_machine(
    token_file: Path, capsys: pytest.CaptureFixture[str], clean_env: None
) -> None:
    argv = ["plan", "--server", "10.20.30.40:50051", "--token-file", str(token_file)]
    assert cli_main([*argv, "--model", "llama3-8b", "--gpus", "8"]) == 2
    err = capsys.readouterr().err
    assert "plaintext" in err and len(err.strip().splitlines()) == 1


def test_a_connection_failure_says_what_it_most_likely_means(pki: Pki, clean_env: None) -> None:
    """A plaintext client at a TLS port is told the server may expect TLS; a client trusting the
    wrong CA, that the handshake failed; the CLI prints its one line and no raw gRPC log line."""
    import subprocess
    import sys

    with running_server(plan_fn=CountingPlan(), tls_cert=str(pki.cert), tls_key=str(pki.key)) as (
        port,
        _,
    ):
        with (
            PlannerClient(f"127.0.0.1:{port}", max_attempts=1) as plain,
            pytest.raises(UnavailableError) as err,
        ):
            plain.plan(small_request(), timeout=5)
        assert "may expect TLS" in err.value.message, err.value.message
        with (
            PlannerClient(f"127.0.0.1:{port}", tls_ca=str(pki.other_ca), max_attempts=1) as wrong,
            pytest.raises(UnavailableError) as err,
        ):
            wrong.plan(small_request(), timeout=5)
        assert "TLS handshake failed" in err.value.message, err.value.message
        env = {k: v for k, v in os.environ.items() if k != "GRPC_VERBOSITY"}
        run = subprocess.run(
            [sys.executable, "-m", "meshplan", "plan", "--server", f"127.0.0.1:{port}", "--tls-ca",
             str(pki.other_ca), "--model", "llama3-8b", "--gpus", "8"],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
    assert run.returncode == 1 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "TLS handshake failed" in run.stderr, run.stderr
