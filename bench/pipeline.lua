-- wrk script: send 16 pipelined GET /hello/world per write (wrk counts each response).
-- Usage: wrk -t1 -c100 -d10s -s bench/pipeline.lua http://127.0.0.1:PORT
init = function(args)
  local r = {}
  for i = 1, 16 do
    r[i] = wrk.format(nil, "/hello/world")
  end
  req = table.concat(r)
end

request = function()
  return req
end
