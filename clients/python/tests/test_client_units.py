"""What the clients decide without a server: endpoints, keys, decoration."""

import asyncio

import pytest

import countersign
from countersign import _core, _wire

PUBLIC_KEY = "11" * 32


@pytest.mark.parametrize(
    "url, target, tls",
    [
        ("http://127.0.0.1:50051", "127.0.0.1:50051", False),
        ("http://countersign.internal:7000/", "countersign.internal:7000", False),
        ("https://countersign.example.com", "countersign.example.com:443", True),
        ("https://countersign.example.com:8443", "countersign.example.com:8443", True),
        ("http://[::1]:50051", "[::1]:50051", False),
        ("http://localhost", "localhost:80", False),
    ],
)
def test_endpoints_are_urls_and_https_means_tls(url, target, tls):
    assert _core.parse_endpoint(url) == _core.Endpoint(target=target, tls=tls)


@pytest.mark.parametrize(
    "url",
    ["127.0.0.1:50051", "grpc://host:1", "http://", "http://host:1/path", "http://user@host:1", "http://host:x", "http://host:1?q"],
)
def test_anything_but_an_http_or_https_url_is_refused(url):
    with pytest.raises(ValueError, match="endpoint"):
        countersign.Client(url, "key", public_key=PUBLIC_KEY)


def test_a_multi_line_api_key_is_refused():
    with pytest.raises(ValueError, match="api_key"):
        countersign.Client("http://127.0.0.1:1", "key\nx-evil: 1", public_key=PUBLIC_KEY)


def test_from_env_reads_the_endpoint_the_key_file_and_the_public_key(tmp_path, monkeypatch):
    key_file = tmp_path / "key"
    key_file.write_text("cs_secret\n")
    monkeypatch.delenv("COUNTERSIGN_API_KEY", raising=False)
    monkeypatch.setenv("COUNTERSIGN_API_KEY_FILE", str(key_file))
    monkeypatch.setenv("COUNTERSIGN_ENDPOINT", "https://cs.example.com")
    monkeypatch.setenv("COUNTERSIGN_PUBLIC_KEY", PUBLIC_KEY)
    with countersign.Client.from_env() as client:
        assert client._endpoint == _core.Endpoint("cs.example.com:443", True)
        assert client._metadata == (("authorization", "Bearer cs_secret"),)
        assert client.trusted_key() == bytes.fromhex(PUBLIC_KEY)


def gate_arguments(**changes):
    arguments = dict(action="py_restart_service", target="node-1", blast_radius="single_device", reason="down")
    arguments.update(changes)
    return arguments


@pytest.mark.parametrize("client_class", [countersign.Client, countersign.AsyncClient])
def test_a_read_class_gate_is_refused_when_decorating(client_class):
    client = client_class("http://127.0.0.1:1", "key", public_key=PUBLIC_KEY)
    with pytest.raises(ValueError, match="read operations are never reviewed"):
        client.gate(**gate_arguments(cls="read"))
    with pytest.raises(ValueError, match="cls"):
        client.gate(**gate_arguments(cls="delete"))
    with pytest.raises(ValueError, match="blast_radius"):
        client.gate(**gate_arguments(blast_radius="planet"))


def test_a_read_class_decided_per_call_is_refused_before_anything_is_sent():
    ran = []
    client = countersign.Client("http://127.0.0.1:1", "key", public_key=PUBLIC_KEY)

    @client.gate(**gate_arguments(cls=lambda kind: kind))
    def act(kind):
        ran.append(kind)

    with pytest.raises(ValueError, match="read operations are never reviewed"):
        act("read")
    assert ran == []


def test_an_async_client_gates_only_coroutine_functions():
    client = countersign.AsyncClient("http://127.0.0.1:1", "key", public_key=PUBLIC_KEY)
    with pytest.raises(TypeError, match="async def"):

        @client.gate(**gate_arguments())
        def plain():
            pass

    @client.gate(**gate_arguments())
    async def coroutine():
        pass

    assert asyncio.iscoroutinefunction(coroutine)


def test_gate_arguments_may_be_callables_of_the_functions_arguments():
    template = _core.GateTemplate(
        action="py_restart_service",
        target=lambda host, service, **kw: host,
        blast_radius="single_device",
        reason=lambda host, service, **kw: f"{service} is down on {host}",
        cls="write",
        parameters=lambda host, service, **kw: {"service": service, **kw},
        operator="",
        context_summary="",
        incident_id="",
        labels=None,
        rollback_plan="",
        force_approve_no_sop=False,
        idempotency_key=None,
        timeout=1.0,
    )
    spec = template.spec(("node-7", "nginx"), {"signal": "HUP"})
    assert spec.target == "node-7"
    assert spec.reason == "nginx is down on node-7"
    assert spec.parameters == {"service": "nginx", "signal": "HUP"}
    assert spec.labels == {} and spec.idempotency_key == ""


def test_derived_idempotency_keys_are_stable_within_a_window_and_differ_across():
    spec = _wire.spec_to_wire(countersign.Spec(action="a", target="t", blast_radius="cluster", reason="r"))
    other = _wire.spec_to_wire(countersign.Spec(action="a", target="t2", blast_radius="cluster", reason="r"))
    key = _core.derive_key("mod.fn", spec, 900.0, 9000.0)
    assert key == _core.derive_key("mod.fn", spec, 900.0, 9899.9)
    assert len(key) <= 128
    assert key != _core.derive_key("mod.fn", spec, 900.0, 9900.0)
    assert key != _core.derive_key("mod.fn", other, 900.0, 9000.0)
    assert key != _core.derive_key("mod.other", spec, 900.0, 9000.0)
    spec.idempotency_key = "given"
    assert key == _core.derive_key("mod.fn", spec, 900.0, 9000.0)


def test_no_public_type_is_a_grpc_or_protobuf_type():
    import inspect

    for name in countersign.__all__:
        value = getattr(countersign, name)
        module = getattr(value, "__module__", "")
        assert module.startswith("countersign"), name
        assert not module.startswith("countersign.v1"), name
        if inspect.isclass(value):
            for base in inspect.getmro(value):
                assert base.__module__.split(".")[0] in ("countersign", "builtins"), (name, base)


class OneCallProposals:
    """A ProposalService stub that decides a Submit only when the Submit
    itself asks to wait for the decision, and has no AwaitDecision."""

    def __init__(self):
        self.waits = []

    def Submit(self, request, timeout=None, metadata=None):
        from countersign.v1 import proposal_service_pb2, types_pb2

        self.waits.append((request.wait_for_decision.ToNanoseconds() / 1e9, timeout))
        waited = request.HasField("wait_for_decision")
        state = types_pb2.PROPOSAL_STATE_APPROVED if waited else types_pb2.PROPOSAL_STATE_PENDING
        proposal = types_pb2.Proposal(id="p1", tenant="acme", spec=request.spec, state=state)
        return proposal_service_pb2.SubmitResponse(proposal=proposal)

    def AwaitDecision(self, request, timeout=None, metadata=None):
        raise AssertionError("submit_and_wait makes one call")


def test_submit_and_wait_is_one_submit_that_waits_within_the_deadline():
    client = countersign.Client("http://127.0.0.1:1", "key", public_key=PUBLIC_KEY)
    client._proposals = OneCallProposals()
    spec = countersign.Spec(action="a", target="t", blast_radius="single_device", reason="r")
    decided = client.submit_and_wait(spec, timeout=30.0)
    assert decided.state == "approved"
    [(wait, timeout)] = client._proposals.waits
    # The wait ends a second before the call's deadline, so the answer comes.
    assert 28.0 < wait <= 29.0 and 29.0 < timeout <= 30.0
    # Without a limit, each Submit waits a chunk and the server caps it.
    client.submit_and_wait(spec, timeout=None)
    assert client._proposals.waits[1] == (_core.SUBMIT_WAIT_CHUNK, None)
