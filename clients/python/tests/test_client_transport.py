"""Tests of crl_client's transport against small in-test HTTP servers (no `crl serve` needed): the URL forms, the
rollouts timeout, answers that are not crl's (a proxy's HTML error page), which requests are retried after a
connection failure, and protobuf's renamed MessageToDict keyword."""

import asyncio
import http.server
import inspect
import json
import os
import socket
import sys
import threading
import time
import types
import unittest
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import crl_client  # noqa: E402
import crl_slime  # noqa: E402
import test_client as tc  # noqa: E402
from crl_client import CrlError, Session  # noqa: E402

# HAProxy's own 502 page (what a fleet answers when a backend dies mid-request).
HAPROXY_502 = (b"<html><body><h1>502 Bad Gateway</h1>\nThe server returned an invalid or incomplete response.\n"
               b"</body></html>\n")


class FakeServer:
    """A loopback HTTP/1.1 server; `routes[(method, path)]` is a function(handler, body) that answers (or not).
    Records every request as (method, path); counts POST /v1/episodes in `creates`."""

    def __init__(self, routes, port=0):
        self.routes = routes
        self.requests = []
        self.creates = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def handle_any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
                outer.requests.append((self.command, self.path))
                if (self.command, self.path) == ("POST", "/v1/episodes"):
                    outer.creates += 1
                route = outer.routes.get((self.command, self.path))
                if route is None:
                    self.answer(404, {"code": "not_found", "message": self.path})
                else:
                    route(self, body)

            do_GET = do_POST = do_DELETE = handle_any

            def answer(self, status, body, content_type="application/json"):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    self.close_connection = True  # the client gave up (its timeout)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def created(handler, body):
    handler.answer(200, {"episode_id": "e1", "kind": "observation", "next_turn_id": 0})


class UrlTest(unittest.TestCase):
    """Session(base_url): "HOST:PORT" without a scheme was port 80 on 127.0.0.1, https was plain HTTP and a path
    prefix was dropped, all silently."""

    def test_host_port_without_scheme(self):
        for url, host, port in (("localhost:7411", "localhost", 7411), ("127.0.0.1:7411", "127.0.0.1", 7411),
                                ("[::1]:7411", "::1", 7411), ("http://10.0.0.2:8000", "10.0.0.2", 8000)):
            s = Session(url)
            self.assertEqual((s.host, s.port, s.prefix), (host, port, ""), url)

    def test_https_and_other_forms_are_refused_by_name(self):
        with self.assertRaisesRegex(ValueError, "https is not supported"):
            Session("https://crl.example:443")
        for bad in ("ftp://x:1", "http://h:1/p?q=1", "http://h:1/#f", "http://user:pw@h:1"):
            with self.assertRaisesRegex(ValueError, "expected http://HOST:PORT"):
                Session(bad)

    def test_path_prefix_is_kept(self):
        server = FakeServer({("GET", "/crl/health"): lambda h, b: h.answer(200, {"status": "ok"})})
        self.addCleanup(server.stop)
        for url in (server.url + "/crl", server.url + "/crl/", server.url[len("http://"):] + "/crl"):
            with Session(url) as s:
                self.assertEqual(s.health(), {"status": "ok"})
        self.assertEqual(server.requests, [("GET", "/crl/health")] * 3)


class RolloutsTimeoutTest(unittest.TestCase):
    """A rollouts call lasts as long as its episodes: it has its own timeout (default 3600 s), not the session's
    (30 s by default), and the session's applies again to the next calls."""

    def test_rollouts_outlast_the_session_timeout(self):
        def slow(handler, body):
            time.sleep(1.0)
            handler.answer(200, {"rollouts": [{"status": "completed", "segments": []}]})

        server = FakeServer({("POST", "/v1/rollouts"): slow, ("GET", "/slow"): slow,
                             ("GET", "/health"): lambda h, b: h.answer(200, {"status": "ok"})})
        self.addCleanup(server.stop)
        with Session(server.url, timeout=0.3, retries=0) as s:
            s.health()  # a keep-alive connection is open: the rollouts call uses it
            answer = s.rollouts([{"env": "synthetic", "task_id": "t"}], {"base_url": "http://127.0.0.1:9"})
            self.assertEqual(answer["rollouts"][0]["status"], "completed")
            self.assertEqual(s.timeout, 0.3)
            with self.assertRaises(TimeoutError):  # other endpoints keep the session's timeout
                s.request("GET", "/slow")
            with self.assertRaises(TimeoutError):  # an explicit one is honoured
                s.rollouts([{"env": "synthetic", "task_id": "t"}], {"base_url": "http://127.0.0.1:9"}, timeout=0.3)


class NotCrlAnswerTest(unittest.TestCase):
    """A body that is not a JSON object (HAProxy's HTML 502 / 504, a JSON list) is a CrlError with the HTTP status
    and a short excerpt, never a JSONDecodeError or AttributeError; the slime adapter makes it a failed sample."""

    @classmethod
    def setUpClass(cls):
        html = lambda status: lambda h, b: h.answer(status, HAPROXY_502.replace(b"502", str(status).encode()),
                                                     "text/html")  # noqa: E731
        cls.server = FakeServer({
            ("GET", "/v1/info"): html(502),
            ("POST", "/v1/rollouts"): html(504),
            ("POST", "/v1/episodes"): html(502),
            ("GET", "/health"): lambda h, b: h.answer(500, b"[1, 2]"),
            ("GET", "/v1/episodes/x"): lambda h, b: h.answer(200, b"<html>" + b"x" * 5000, "text/html"),
        })

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_a_proxy_error_page_is_a_typed_error(self):
        with Session(self.server.url) as s:
            with self.assertRaises(CrlError) as err:
                s.info()
            self.assertEqual((err.exception.status, err.exception.code), (502, "http_error"))
            self.assertIn("502 Bad Gateway</h1> The server returned", err.exception.message)
            self.assertIn("text/html", err.exception.message)
            with self.assertRaises(CrlError) as err:
                s.health()  # a JSON list
            self.assertEqual((err.exception.status, err.exception.code), (500, "http_error"))
            self.assertIn("[1, 2]", err.exception.message)
            with self.assertRaises(CrlError) as err:
                s.request("GET", "/v1/episodes/x")  # a 200 that is not crl's
            self.assertEqual((err.exception.status, err.exception.code), (200, "bad_answer"))
            self.assertLess(len(err.exception.message), 300)  # an excerpt, not the page
            self.assertTrue(str(err.exception).isprintable())

    def test_slime_makes_it_a_failed_sample(self):
        args = types.SimpleNamespace(seed=7)
        for generate in (crl_slime.make_rollout_generate(llm_url="http://127.0.0.1:9", server_url=self.server.url),
                         crl_slime.make_generate(lambda *a: {}, server_url=self.server.url)):
            sample = tc.StandInSample(group_index=0, index=0, metadata={"env": "synthetic", "task_id": "t"})
            out = asyncio.run(generate(args, sample, {}))
            self.assertIs(out, sample)
            self.assertEqual(out.status, tc.StandInSample.Status.FAILED)
            self.assertRegex(out.metadata["crl_error"], r"^50[24] http_error: not a crl answer")


class RetryTest(unittest.TestCase):
    """POST /v1/episodes makes an episode each time it arrives: a create whose answer was lost is not sent again
    (a duplicate episode), but one that never left (connection refused) is."""

    def test_a_create_whose_answer_is_lost_is_not_sent_twice(self):
        lost = []

        def drop_first(handler, body):
            if not lost:
                lost.append(body)
                handler.close_connection = True  # read the request, close without an answer
                return
            created(handler, body)

        server = FakeServer({("POST", "/v1/episodes"): drop_first})
        self.addCleanup(server.stop)
        with Session(server.url, retries=3) as s:
            with self.assertRaises(ConnectionError):
                s.create("memory_chain", task_id="t")
            self.assertEqual(server.creates, 1)
            self.assertEqual(s.create("memory_chain", task_id="t").id, "e1")  # the caller decides to try again
            self.assertEqual(server.creates, 2)

    def test_a_create_is_retried_while_the_connection_cannot_be_made(self):
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # nothing listens there: connections are refused until the server below starts
        servers = []

        def start_later():
            time.sleep(0.2)
            servers.append(FakeServer({("POST", "/v1/episodes"): created}, port=port))

        starter = threading.Thread(target=start_later)
        starter.start()
        try:
            with Session(f"127.0.0.1:{port}", retries=30) as s:
                self.assertEqual(s.create("memory_chain", task_id="t").id, "e1")
        finally:
            starter.join()
            for server in servers:
                server.stop()
        self.assertEqual(servers[0].creates, 1)

    def test_a_connection_the_server_closed_while_idle_is_not_used(self):
        def health_then_close(handler, body):
            handler.answer(200, {"status": "ok"})  # keep-alive as far as the client knows ...
            handler.close_connection = True        # ... but closed (a server's idle timeout)

        server = FakeServer({("GET", "/health"): health_then_close, ("POST", "/v1/episodes"): created})
        self.addCleanup(server.stop)
        with Session(server.url) as s:
            s.health()
            time.sleep(0.2)  # the close reaches the client
            self.assertEqual(s.create("memory_chain", task_id="t").id, "e1")
        self.assertEqual(server.creates, 1)


class MessageToDictTest(unittest.TestCase):
    """protobuf 5.26 removed MessageToDict's including_default_value_fields (now
    always_print_fields_with_no_presence); Debian 12's 4.21 has only the old name."""

    def test_the_keyword_the_installed_protobuf_accepts(self):
        try:
            from google.protobuf import json_format
        except ImportError:
            self.skipTest("python3-protobuf is not installed")
        calls = []

        def new_style(message, preserving_proto_field_name=False, always_print_fields_with_no_presence=False):
            calls.append(("new", preserving_proto_field_name, always_print_fields_with_no_presence))
            return {"status": "ok"}

        def old_style(message, preserving_proto_field_name=False, including_default_value_fields=False):
            calls.append(("old", preserving_proto_field_name, including_default_value_fields))
            return {"status": "ok"}

        class Message:
            def ParseFromString(self, data):
                pass

        session = Session("127.0.0.1:1")
        session.pb = types.SimpleNamespace(HealthResponse=Message)
        for fake in (new_style, old_style):
            with mock.patch.object(json_format, "MessageToDict", fake):
                self.assertEqual(session._decode(200, crl_client.PROTOBUF, b"", "HealthResponse"), {"status": "ok"})
        self.assertEqual(calls, [("new", True, True), ("old", True, True)])
        # The installed one: the keyword chosen is one it has.
        keyword = crl_client._defaults_keyword(json_format.MessageToDict)
        self.assertIn(keyword, inspect.signature(json_format.MessageToDict).parameters)


if __name__ == "__main__":
    unittest.main()
