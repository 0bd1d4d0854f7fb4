"""aiohttp serving one file's bytes, read once into memory, at every path.

usage: aioblob.py FILE PORT  (Debian's /usr/bin/python3, python3-aiohttp)
Used by tests/integration/t_aiohttp.sh and bench/servers.sh."""
import sys

from aiohttp import web

blob = open(sys.argv[1], "rb").read()


async def get_blob(request):
    return web.Response(body=blob, content_type="application/octet-stream")


app = web.Application()
app.add_routes([web.get("/{path:.*}", get_blob)])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), print=None)
