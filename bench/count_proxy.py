"""A reverse proxy that counts the bytes of the response bodies it relays: what a
client fetched from an S3 API, measured outside the client.

    python count_proxy.py LISTEN_PORT UPSTREAM_URL COUNT_FILE [--delay-ms N] [--log FILE]

Every request is forwarded to UPSTREAM_URL with its method, path, headers and body;
the bytes of GET responses' bodies are added to the running total in COUNT_FILE
(rewritten after each response), and GET requests counted in COUNT_FILE.gets.

--delay-ms N holds every request back N ms before it is forwarded, so its answer's
first byte comes N ms later, as a remote store's time to first byte (requests in
flight at once are each delayed, side by side). --log FILE appends one line per
request: its arrival and answer times (seconds, monotonic), method, path, Range
header and body bytes.
"""
import argparse
import http.client
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

LOCK = threading.Lock()
TOTAL = {"bytes": 0, "gets": 0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("upstream")
    ap.add_argument("count_file")
    ap.add_argument("--delay-ms", type=float, default=0.0)
    ap.add_argument("--log")
    args = ap.parse_args()
    port, upstream, count_file = args.port, urlparse(args.upstream), args.count_file
    delay = args.delay_ms / 1000.0
    log = open(args.log, "a", buffering=1) if args.log else None

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def relay(self):
            arrived = time.monotonic()
            if delay:
                time.sleep(delay)
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            headers = {k: v for k, v in self.headers.items()}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            # Counted (and logged) before the client gets the body: once a
            # client has its bytes and exits, the count holds them.
            with LOCK:
                if self.command == "GET":
                    TOTAL["bytes"] += len(data)
                    TOTAL["gets"] += 1
                with open(count_file, "w") as f:
                    f.write(str(TOTAL["bytes"]))
                with open(count_file + ".gets", "w") as f:
                    f.write(str(TOTAL["gets"]))
                if log:
                    log.write(f"{arrived:.4f} {time.monotonic():.4f} {self.command} {self.path} "
                              f"{self.headers.get('Range', '-')} {len(data)}\n")
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            conn.close()

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = relay

        def log_message(self, *args):
            pass

    class Server(ThreadingHTTPServer):
        # A store takes every connection a client opens at once; the default
        # backlog of 5 drops the others' SYNs, which then wait a second.
        request_queue_size = 128
        daemon_threads = True

    Server(("127.0.0.1", port), Proxy).serve_forever()


if __name__ == "__main__":
    main()
