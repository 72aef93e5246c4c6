"""Minimal loopback stand-in for the Hugging Face Hub upload endpoints, for offline push_to_hub tests.

It lets `model.push_to_hub(...)`, `Trainer.push_to_hub(...)` and `HfApi.upload_folder(...)` run against
127.0.0.1 with no network, and lets `from_pretrained(repo_id, trust_remote_code=True)` read the pushed
files back. Every file is accepted as a "regular" (inline, base64) upload, so the LFS/Xet transfer
protocols are never exercised: this tests our side (file set, auto_map, model card), not the transport.
Only the Python standard library is used.

Start it (port and store directory are optional):

    python3 fake_hub.py 8765 ./fake_hub_store &
    export HF_ENDPOINT=http://127.0.0.1:8765 HF_HUB_DISABLE_TELEMETRY=1 HF_HOME=$(mktemp -d)
    # push with token="hf_fake"; stop the server with `kill <its pid>` when done

Endpoints served (anything else answers 404 JSON):

    POST      /api/repos/create                         -> {"url", "name", "id"}; creates <store>/<org>/<name>/
    any       /api/validate-yaml                        -> {"errors": [], "warnings": []}
    any       /api/whoami-v2                            -> a fake user with a write token
    POST      /api/<type>s/<org>/<name>/preupload/<rev> -> uploadMode "regular" for every file
    POST      /api/<type>s/<org>/<name>/commit/<rev>    -> stores the NDJSON "file" operations under <store>/<org>/<name>/
    HEAD/GET  /<org>/<name>/resolve/<rev>/<path>        -> the stored file (ETag, X-Repo-Commit), or
                                                           404 with X-Error-Code: EntryNotFound

Committed files land in <store>/<org>/<name>/; each request is logged to <store>/requests.log.
The server binds to 127.0.0.1 only and answers 503 after MAX_REQUESTS requests.

A loopback stand-in for the Hub's upload endpoints. Notes: port 0 picks a free port, and the bound address
is printed as the first line on stdout ("fake hub listening on http://127.0.0.1:PORT"), so parallel test runs
never collide on a fixed port; `--max-requests N` sets the request budget.
"""

import argparse
import base64
import hashlib
import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse


MAX_REQUESTS = 500
STORE = "fake_hub_store"
PORT = 8765
LOG = None
count = 0


class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, code, obj=None, headers=None):
        body = b"" if obj is None else json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            data = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            return data
        return b""

    def handle_one(self):
        global count
        count += 1
        if count > MAX_REQUESTS:
            self._send(503, {"error": "request budget exhausted"})
            return
        path = unquote(urlparse(self.path).path)
        body = self._body() if self.command in ("POST", "PUT") else b""
        LOG.write(f"{self.command} {path} {len(body)}\n")
        LOG.flush()
        parts = path.strip("/").split("/")
        ep = f"http://127.0.0.1:{PORT}"
        if self.command == "POST" and path == "/api/repos/create":
            p = json.loads(body or b"{}")
            rid = f"{p.get('organization') or 'user'}/{p['name']}"
            os.makedirs(os.path.join(STORE, rid), exist_ok=True)
            return self._send(200, {"url": f"{ep}/{rid}", "name": rid, "id": rid})
        if path == "/api/validate-yaml":
            return self._send(200, {"errors": [], "warnings": []})
        if path == "/api/whoami-v2":
            return self._send(
                200, {"name": "user", "type": "user", "orgs": [], "auth": {"accessToken": {"role": "write"}}}
            )
        if len(parts) >= 6 and parts[0] == "api" and parts[4] == "preupload":
            files = json.loads(body).get("files", [])
            return self._send(
                200,
                {
                    "files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files],
                    "commitOid": "0" * 40,
                },
            )
        if len(parts) >= 6 and parts[0] == "api" and parts[4] == "commit":
            rid = f"{parts[2]}/{parts[3]}"
            n = 0
            for line in body.decode().splitlines():
                if not line.strip():
                    continue
                item = json.loads(line)
                if item.get("key") == "file":
                    v = item["value"]
                    dest = os.path.join(STORE, rid, v["path"])
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with open(dest, "wb") as f:
                        f.write(base64.b64decode(v["content"]))
                    n += 1
                elif item.get("key") not in ("header", "deletedFile", "deletedFolder"):
                    LOG.write(f"  unhandled op {item.get('key')}\n")
            LOG.write(f"  committed {n} files to {rid}\n")
            LOG.flush()
            return self._send(
                200,
                {
                    "commitUrl": f"{ep}/{rid}/commit/{'a' * 40}",
                    "commitOid": "a" * 40,
                    "success": True,
                    "pullRequestUrl": None,
                },
            )
        if len(parts) >= 4 and parts[2] == "resolve":
            rid = f"{parts[0]}/{parts[1]}"
            f = os.path.join(STORE, rid, "/".join(parts[4:]))
            if os.path.isfile(f):
                with open(f, "rb") as fh:
                    data = fh.read()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("ETag", f'"{hashlib.sha1(data).hexdigest()}"')
                self.send_header("X-Repo-Commit", "a" * 40)
                self.end_headers()
                if self.command == "GET":
                    self.wfile.write(data)
                return
            return self._send(
                404, {"error": "Entry not found"}, {"X-Error-Code": "EntryNotFound", "X-Repo-Commit": "a" * 40}
            )
        return self._send(404, {"error": f"fake hub: no route {self.command} {path}"})

    do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = handle_one

    def log_message(self, *a):
        pass


def main():
    global STORE, PORT, LOG, MAX_REQUESTS
    parser = argparse.ArgumentParser(description="Loopback stand-in for the Hub upload endpoints (offline tests).")
    parser.add_argument(
        "port", nargs="?", type=int, default=PORT, help="port on 127.0.0.1, 0 for any free port (default %(default)s)"
    )
    parser.add_argument("store", nargs="?", default=STORE, help="directory for pushed repos (default %(default)s)")
    parser.add_argument(
        "--max-requests", type=int, default=MAX_REQUESTS, help="answer 503 after this many requests (%(default)s)"
    )
    args = parser.parse_args()
    PORT, STORE, MAX_REQUESTS = args.port, args.store, args.max_requests
    os.makedirs(STORE, exist_ok=True)
    LOG = open(os.path.join(STORE, "requests.log"), "a")
    srv = ThreadingHTTPServer(("127.0.0.1", PORT), H)
    PORT = srv.server_address[1]
    print(f"fake hub listening on http://127.0.0.1:{PORT}", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
