#!/usr/bin/env python3
"""relay-hostile.py - a parent that cheats a relay, for tests/t08NN-relay-*.sh.
Standard library only.

usage: relay-hostile.py --port-file FILE MODE DIR [ARG]
  Objects are DIR's files, as BASE/NAME with BASE "/store" (Range
  "bytes=A-B" and "bytes=A-" honoured); MODE changes pack A's:
  race     A/manifest.dcrm is absent until a GET of A/payload-000000.dcrp
           starts; that GET then waits until the file DIR/release exists
           and answers another pack's payload, DIR/B/payload-000000.dcrp
           (one that checks out by its own trailer)
  bigsig   A/manifest.dcrm.sig is ARG MiB of "x" (200, its true
           Content-Length), written until the client hangs up; the bytes
           it took are logged as "SIG-SENT N"
Each request is logged to stderr as "METHOD PATH STATUS".
"""
import http.server
import os
import socketserver
import sys
import threading
import time

import portfile

MODE = None
DIR = "."
ARG = 0
seen_payload = threading.Event()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def log(self, status):
        sys.stderr.write("%s %s %s\n" % (self.command, self.path, status))
        sys.stderr.flush()

    def body(self, name):
        if MODE == "race" and name == "A/manifest.dcrm" and not seen_payload.is_set():
            return None
        if MODE == "race" and name == "A/payload-000000.dcrp":
            name = "B/payload-000000.dcrp"
        path = os.path.join(DIR, name)
        if ".." in name.split("/") or not os.path.isfile(path):
            return None
        with open(path, "rb") as f:
            return f.read()

    def answer(self, head):
        name = self.path.split("?")[0]
        if not name.startswith("/store/"):
            return self.status(404, head)
        name = name[len("/store/"):]
        if MODE == "bigsig" and name == "A/manifest.dcrm.sig":
            return self.bigsig(head)
        if MODE == "race" and name == "A/payload-000000.dcrp" and not head:
            seen_payload.set()
            self.log("WAIT")
            deadline = time.time() + 60
            while not os.path.exists(os.path.join(DIR, "release")) and time.time() < deadline:
                time.sleep(0.02)
        data = self.body(name)
        if data is None:
            return self.status(404, head)
        a, b, st = 0, len(data) - 1, 200
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes=") and "," not in rng:
            x, y = rng[6:].split("-")
            a, b, st = int(x), int(y) if y else len(data) - 1, 206
            b = min(b, len(data) - 1)
        self.send_response(st)
        self.send_header("Content-Length", str(b - a + 1))
        if st == 206:
            self.send_header("Content-Range", "bytes %d-%d/%d" % (a, b, len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data[a:b + 1])
        self.log(st)

    def status(self, code, head):
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self.log(code)

    def bigsig(self, head):
        n = ARG << 20
        self.send_response(200)
        self.send_header("Content-Length", str(n))
        self.end_headers()
        self.log(200)
        if head:
            return
        chunk, sent = b"x" * (1 << 16), 0
        try:
            while sent < n:
                self.wfile.write(chunk)
                sent += len(chunk)
            self.wfile.flush()
        except OSError:
            pass
        sys.stderr.write("SIG-SENT %d\n" % sent)
        sys.stderr.flush()
        self.close_connection = True

    def do_GET(self):
        self.answer(False)

    def do_HEAD(self):
        self.answer(True)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def main():
    global MODE, DIR, ARG
    args = sys.argv[1:]
    if len(args) < 4 or args[0] != "--port-file":
        sys.exit("usage: relay-hostile.py --port-file FILE MODE DIR [ARG]")
    MODE, DIR = args[2], args[3]
    ARG = int(args[4]) if len(args) > 4 else 0
    portfile.serve(Server(("127.0.0.1", 0), Handler), args[1])


if __name__ == "__main__":
    main()
