"""python -m berth --ssl-keyfile-password (uvicorn's name; issue 43): an encrypted private key
(ENCRYPTED PRIVATE KEY, as openssl pkcs8 -topk8 writes it) is served with its password; without
it the server does not start, and says the key is encrypted and how to decrypt it."""

import subprocess
import sys

from helpers import HERE, need, stop


def keys(tmp_path):
    cert, key, enc = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "enc.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                    "/CN=localhost", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    subprocess.run(["openssl", "pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout",
                    "pass:sesame", "-in", str(key), "-out", str(enc)],
                   check=True, capture_output=True)
    assert b"ENCRYPTED PRIVATE KEY" in enc.read_bytes()
    return str(cert), str(enc)


def test_an_encrypted_key_is_served_with_its_password(tmp_path):
    httpx = need("httpx")
    cert, enc = keys(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "berth", "apps.ext_apps:teapot", "--port", "0",
         "--ssl-certfile", cert, "--ssl-keyfile", enc, "--ssl-keyfile-password", "sesame"],
        cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("berth listening on https://"), line + proc.stderr.read()
        url = line.split(" ")[3]
        r = httpx.get(url + "/", verify=False, timeout=10)
        assert r.status_code == 418 and r.content == b"the app\n"
    finally:
        stop(proc)


def test_an_encrypted_key_without_its_password_says_so(tmp_path):
    cert, enc = keys(tmp_path)
    for extra, says in (([], "the private key is encrypted (ENCRYPTED PRIVATE KEY)"),
                        (["--ssl-keyfile-password", "nope"], "wrong password")):
        out = subprocess.run(
            [sys.executable, "-m", "berth", "apps.ext_apps:teapot", "--port", "0",
             "--ssl-certfile", cert, "--ssl-keyfile", enc, *extra],
            cwd=HERE, capture_output=True, text=True, timeout=30)
        assert out.returncode == 1, out.stderr
        assert says in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    out = subprocess.run([sys.executable, "-m", "berth", "apps.ext_apps:teapot",
                          "--ssl-keyfile-password", "x"],
                         cwd=HERE, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--ssl-keyfile-password needs --ssl-keyfile" in out.stderr
