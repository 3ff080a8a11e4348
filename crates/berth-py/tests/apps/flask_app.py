"""Seed 004's routes as a Flask app, unchanged from how a Flask user writes them."""

from flask import Flask, jsonify, request

app = Flask(__name__)


@app.get("/hello/world")
def hello():
    return "Hello, World!"


@app.post("/reverse")
def reverse():
    data = request.get_json(force=True)
    return jsonify({"data": [v[::-1] for v in data.values()]})


@app.get("/boom")
def boom():
    raise RuntimeError("the application failed")


@app.get("/headers")
def headers():
    response = jsonify({"agent": request.headers.get("User-Agent"), "query": request.args.to_dict()})
    response.headers["X-Berth-Test"] = "yes"
    response.set_cookie("a", "1")
    return response


@app.get("/client")
def client():
    # Where a Flask user reads the client's address: request.remote_addr (REMOTE_ADDR).
    return jsonify({"addr": request.remote_addr, "port": request.environ.get("REMOTE_PORT"),
                    "protocol": request.environ.get("SERVER_PROTOCOL")})


@app.post("/echo")
def echo():
    # request.data: the raw body (for a content type that is not a form), as Flask users read it.
    return request.data, 200, {"Content-Type": "application/octet-stream"}
