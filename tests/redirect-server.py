#!/usr/bin/env python3
"""redirect-server.py - an HTTP server that serves files and redirects,
for tests/t0604. Standard library only.

usage: redirect-server.py --port-file FILE DIR [--tls CERT KEY]
  GET/HEAD /to/PORT/REST  302 to http://127.0.0.1:PORT/REST (another origin)
  any      /moved/REST    301 to /REST (a relative Location)
  GET/HEAD /loop/REST     302 to /loop/REST (for ever)
  GET/HEAD /file/REST     302 to file:///etc/passwd
  any      /sig/REST      302 to /REST?X-Amz-Signature=SECRET
  any      /cred/REST     302 to http://v:SECRET@127.0.0.1:1/REST
  GET/HEAD anything else  the file DIR/PATH (no Range), or 404
With --tls it speaks HTTPS only, with that certificate and key.
Each request is logged to stderr as "METHOD PATH AUTHORIZATION".
"""
import http.server
import ssl
import sys

import portfile

ROOT = None


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def __init__(self, *a, **k):
        super().__init__(*a, directory=ROOT, **k)

    def log_message(self, fmt, *args):
        pass

    def _note(self):
        sys.stderr.write("%s %s %s\n" % (self.command, self.path,
                                         self.headers.get("Authorization", "")))
        sys.stderr.flush()

    def _go(self, code, where):
        body = b"moved\n"
        self.send_response(code)
        self.send_header("Location", where)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        return True

    def _route(self):
        p = self.path
        if p.startswith("/to/"):
            port, _, rest = p[4:].partition("/")
            return self._go(302, "http://127.0.0.1:%s/%s" % (port, rest))
        if p.startswith("/moved/"):
            return self._go(301, p[6:])
        if p.startswith("/loop/"):
            return self._go(302, p)
        if p.startswith("/file/"):
            return self._go(302, "file:///etc/passwd")
        if p.startswith("/sig/"):
            return self._go(302, p[4:] + "?X-Amz-Signature=SECRET")
        if p.startswith("/cred/"):
            return self._go(302, "http://v:SECRET@127.0.0.1:1" + p[5:])
        return False

    def do_GET(self):
        self._note()
        if not self._route():
            super().do_GET()

    def do_HEAD(self):
        self._note()
        if not self._route():
            super().do_HEAD()

    def do_PUT(self):
        self._note()
        n = int(self.headers.get("Content-Length", "0"))
        while n > 0:
            got = self.rfile.read(min(n, 65536))
            if not got:
                break
            n -= len(got)
        if not self._route():
            self.send_error(405)


def main():
    global ROOT
    args = sys.argv[1:]
    if len(args) not in (3, 6) or args[0] != "--port-file" or \
            (len(args) == 6 and args[3] != "--tls"):
        sys.exit(__doc__)
    ROOT = args[2]
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    if len(args) == 6:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args[4], args[5])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    portfile.serve(srv, args[1])


if __name__ == "__main__":
    main()
