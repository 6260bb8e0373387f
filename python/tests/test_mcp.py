"""`ditto mcp` driven by the official MCP Python SDK's client, over
streamable HTTP (`ditto mcp --http 0`) and over stdio: the handshake, the
tool list, a validate call that fails with its report, and a long call
that neither holds the HTTP server nor keeps it from stopping on SIGTERM
or SIGINT (Ctrl-C).
"""

import contextlib
import inspect
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest

try:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
except ImportError:
    pytest.fail("the MCP Python SDK is missing: run scripts/install-deps (or pip install mcp)", pytrace=False)

try:
    from mcp.client.streamable_http import streamable_http_client as http_client
except ImportError:  # SDK releases before 2
    from mcp.client.streamable_http import streamablehttp_client as http_client

try:
    from mcp.shared._httpx_utils import create_mcp_http_client
except ImportError:  # SDK releases that take headers= themselves
    create_mcp_http_client = None

SERVING = re.compile(r"^ditto mcp: serving MCP over HTTP at (http://127\.0\.0\.1:(\d+)/mcp)$")
TOKEN = re.compile(r"^ditto mcp: every request needs the header Authorization: Bearer ([0-9a-f]{64}); "
                   r"the token is also in (/\S+) \(only you can read it\)$")
TOOLS = ["capture", "compare", "kernels", "replay", "validate"]


class HttpServer:
    """`ditto mcp --http 0`, its URL and token as it printed them."""

    def __init__(self, ditto_bin: Path, runtime_dir: Path) -> None:
        self.process = subprocess.Popen(
            [str(ditto_bin), "mcp", "--http", "0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, XDG_RUNTIME_DIR=str(runtime_dir)),
        )
        first = self.process.stderr.readline().rstrip("\n")
        match = SERVING.match(first)
        assert match, f"ditto mcp --http 0 printed {first!r}"
        assert int(match.group(2)) > 0
        self.url = match.group(1)
        second = self.process.stderr.readline().rstrip("\n")
        match = TOKEN.match(second)
        assert match, f"ditto mcp --http 0 printed {second!r} after its URL"
        self.token = match.group(1)
        self.token_file = Path(match.group(2))

    def transport(self, **options):
        """The SDK's streamable HTTP transport to this server, sending the token."""
        return http_transport(self.url, {"Authorization": f"Bearer {self.token}"}, **options)

    def stop(self, how: signal.Signals = signal.SIGTERM) -> int:
        """Sends `how`; the exit status (the test fails if it takes 10 s)."""
        if self.process.poll() is None:
            self.process.send_signal(how)
        return self.process.wait(timeout=10)


@contextlib.asynccontextmanager
async def _through_client(url: str, headers: dict, **options):
    async with create_mcp_http_client(headers=headers) as client:
        async with http_client(url, http_client=client, **options) as streams:
            yield streams


def http_transport(url: str, headers: dict, **options):
    """The SDK's transport to `url` sending `headers` with every request: SDK
    2 takes them on an httpx client it is given, earlier ones as `headers=`."""
    if "http_client" in inspect.signature(http_client).parameters:
        return _through_client(url, headers, **options)
    return http_client(url, headers=headers, **options)


@pytest.fixture
def http_server(ditto_bin, tmp_path):
    server = HttpServer(ditto_bin, tmp_path / "run")
    yield server
    if server.process.poll() is None:
        server.process.kill()
        server.process.wait()
    server.process.stderr.close()


def as_json(result) -> dict:
    """A result as its wire JSON (camelCase), whatever the SDK's field names."""
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


async def open_session(transport, session_body):
    """Runs `session_body(session, initialize_result)` on a client session
    over `transport` (an SDK transport context manager)."""
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            return await session_body(session, init)


def check_the_tools_and_a_failing_validate(apps):
    async def body(session, init):
        assert as_json(init)["serverInfo"]["name"] == "ditto"
        listed = await session.list_tools()
        assert sorted(t.name for t in listed.tools) == TOOLS
        with anyio.fail_after(120):
            result = await session.call_tool(
                "validate",
                {
                    "kernel": "reduce_sum",
                    "reference": [str(apps / "reduce_sum_baseline")],
                    "optimized": [str(apps / "reduce_sum_wrong")],
                    "hsa_runtime": "cpu",
                },
            )
        return as_json(result)

    return body


def assert_the_mismatch_report(result: dict) -> None:
    assert result.get("isError", False) is False, result
    report = result["structuredContent"]
    assert report["valid"] is False
    (mismatch,) = report["mismatches"]
    assert (mismatch["arg"], mismatch["max_abs_diff"]) == (1, 98301.5)
    summary = result["content"][0]["text"]
    assert summary.startswith("FAIL"), summary
    assert "Mismatched elements: 1 / 1" in summary, summary
    assert summary == report["summary"]


def test_over_http_the_sdk_lists_the_tools_and_validate_reports_the_mismatch(http_server, apps):
    assert http_server.token_file.read_text() == http_server.token + "\n"
    assert http_server.token_file.stat().st_mode & 0o777 == 0o600
    result = anyio.run(open_session, http_server.transport(), check_the_tools_and_a_failing_validate(apps))
    assert_the_mismatch_report(result)
    assert http_server.stop() == 0
    assert not http_server.token_file.exists()


def test_over_stdio_the_sdk_lists_the_tools_and_validate_reports_the_mismatch(ditto_bin, apps):
    server = StdioServerParameters(command=str(ditto_bin), args=["mcp"])
    result = anyio.run(open_session, stdio_client(server), check_the_tools_and_a_failing_validate(apps))
    assert_the_mismatch_report(result)


def processes_with_argument(argument: str) -> list:
    """Pids of the processes whose command line has `argument` as a word."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            words = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argument.encode() in words:
            found.append(int(entry.name))
    return found


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_long_call_holds_neither_other_requests_nor_stopping(http_server, tmp_path, how):
    # An application that runs for a minute unless stopped: the capture
    # call waits for it. Its argument is unique, to find it in /proc.
    seconds = f"{60 + os.getpid() % 1000 / 1000:.3f}"
    answered_during_the_call = []

    async def body(session, _init):
        async def long_call():
            try:
                await session.call_tool(
                    "capture",
                    {"kernel": "reduce_sum", "command": ["sleep", seconds], "out": str(tmp_path / "snap")},
                )
            except Exception:  # the server stops under it
                pass

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(long_call)
            with anyio.fail_after(20):
                while not processes_with_argument(seconds):
                    await anyio.sleep(0.05)
            with anyio.fail_after(5):
                listed = await session.list_tools()
            answered_during_the_call.append(sorted(t.name for t in listed.tools))
            started = time.monotonic()
            assert http_server.stop(how) == 0
            answered_during_the_call.append(time.monotonic() - started)
            tasks.cancel_scope.cancel()

    try:
        anyio.run(open_session, http_server.transport(terminate_on_close=False), body)
    except BaseException:
        # The SDK's streams may end in an error when the server goes; that
        # is no failure once both measurements are in.
        if len(answered_during_the_call) < 2:
            raise
    assert answered_during_the_call[0] == TOOLS
    assert answered_during_the_call[1] < 5, f"{how.name} took {answered_during_the_call[1]:.1f} s"
    deadline = time.monotonic() + 10
    while processes_with_argument(seconds) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert processes_with_argument(seconds) == [], "the call's application outlived the server"
