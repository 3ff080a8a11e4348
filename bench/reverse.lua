-- wrk script for bench/http.py's `reverse` shape: POST /reverse with the lab's JSON object
-- (seed 004's post.lua, the body `berth lab` sends).
wrk.method = "POST"
wrk.path = "/reverse"
wrk.body = '{"greeting": "Hello, World!", "name": "berth"}'
wrk.headers["Content-Type"] = "application/json"
