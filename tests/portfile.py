"""portfile.py - shared by the tests' Python servers (lie-server.py,
redirect-server.py): serve on the port the kernel picked, once its number
is in PORT_FILE (written whole, then renamed, so that a test polling for
the file never reads half of it)."""
import os


def serve(srv, port_file):
    with open(port_file + ".tmp", "w") as p:
        p.write("%d\n" % srv.server_address[1])
    os.rename(port_file + ".tmp", port_file)
    srv.serve_forever()
