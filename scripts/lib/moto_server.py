"""moto's DynamoDB API on HOST PORT, one request at a time.

moto's own `moto_server` serves requests on threads, and moto is not safe
for concurrent requests: two conditional writes at once could both pass
their conditions. Served here by werkzeug without threads, every request
runs alone, so conditional writes are linearizable, as DynamoDB's are.
Tables live in memory: a restart is a state loss.

    python moto_server.py HOST PORT
"""

import sys

from moto.server import DomainDispatcherApplication, create_backend_app
from werkzeug.serving import run_simple

host, port = sys.argv[1], int(sys.argv[2])
run_simple(host, port, DomainDispatcherApplication(create_backend_app),
           threaded=False, processes=1, use_reloader=False, use_debugger=False)
