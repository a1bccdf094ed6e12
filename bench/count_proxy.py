"""A reverse proxy that counts the bytes of the response bodies it relays: what a
client fetched from an S3 API, measured outside the client.

    python count_proxy.py LISTEN_PORT UPSTREAM_URL COUNT_FILE

Every request is forwarded to UPSTREAM_URL with its method, path, headers and body;
the bytes of GET responses' bodies are added to the running total in COUNT_FILE
(rewritten after each response), and GET requests counted in COUNT_FILE.gets.
"""
import http.client
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

LOCK = threading.Lock()
TOTAL = {"bytes": 0, "gets": 0}


def main():
    port, upstream, count_file = int(sys.argv[1]), urlparse(sys.argv[2]), sys.argv[3]

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def relay(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=60)
            headers = {k: v for k, v in self.headers.items()}
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            self.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            with LOCK:
                if self.command == "GET":
                    TOTAL["bytes"] += len(data)
                    TOTAL["gets"] += 1
                with open(count_file, "w") as f:
                    f.write(str(TOTAL["bytes"]))
                with open(count_file + ".gets", "w") as f:
                    f.write(str(TOTAL["gets"]))
            conn.close()

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = relay

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Proxy).serve_forever()


if __name__ == "__main__":
    main()
