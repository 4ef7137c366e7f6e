"""A gRPC client (grpcio) calling lowlat.test.Echo's streaming-request methods, in clear (h2c
prior knowledge): what the proxy's client- and bidirectional-streaming tests run through it.

    python3 grpc_client.py HOST:PORT client-stream COUNT PAYLOAD_BYTES
    python3 grpc_client.py HOST:PORT bidi COUNT

client-stream sends COUNT requests ("m0", "m1", ...) each with PAYLOAD_BYTES of the pattern
(common.pattern, continuing from one request to the next), and prints the reply as JSON.

bidi sends one request, waits for its reply, then sends the next: the call can only complete if
every reply crosses while the request stream is still open. Prints JSON: the replies' messages
and indexes, in order.

Every call has a 60 s deadline: a proxy that holds a message back fails the call instead of
hanging the test. A failed call prints its status on stderr and exits 1.
"""

import hashlib
import json
import os
import queue
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

import grpc  # noqa: E402

protos, services = grpc.protos_and_services("echo.proto")


def client_stream(stub, count, size):
    data = b"".join(common.pattern(count * size))

    def requests():
        for i in range(count):
            yield protos.EchoRequest(message=f"m{i}", payload=data[i * size:(i + 1) * size])

    reply = stub.ClientStream(requests(), timeout=60)
    return {
        "message": reply.message,
        "count": reply.index,
        "payload_bytes": int(reply.metadata["payload_bytes"]),
        "payload_sha256": reply.metadata["payload_sha256"],
        "sent_sha256": hashlib.sha256(data).hexdigest(),
    }


def bidi(stub, count):
    replied = queue.Queue()

    def requests():
        for i in range(count):
            yield protos.EchoRequest(message=f"b{i}", pad_bytes=100)
            # The next request only after this one's reply: lock-step across the proxy.
            replied.get(timeout=60)

    replies = []
    for reply in stub.BidiStream(requests(), timeout=60):
        replies.append({"message": reply.message, "index": reply.index})
        replied.put(None)
    return {"replies": replies}


def main():
    target, kind = sys.argv[1], sys.argv[2]
    with grpc.insecure_channel(target) as channel:
        stub = services.EchoStub(channel)
        try:
            if kind == "client-stream":
                out = client_stream(stub, int(sys.argv[3]), int(sys.argv[4]))
            else:
                out = bidi(stub, int(sys.argv[3]))
        except grpc.RpcError as e:
            sys.stderr.write(f"grpc_client: {e.code()}: {e.details()}\n")
            sys.exit(1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
