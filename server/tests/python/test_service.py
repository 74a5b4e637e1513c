"""The grantid server against the official Python gRPC client.

Stubs come from grpcio-tools, generated from the committed
proto/grantid/v1/grantid.proto into a directory on PYTHONPATH (see
scripts/test.d/35-service.sh). Each test class starts its own
`grantid serve` (GRANTID_BIN) on a free port with a file authority in a
temporary directory, and stops it.

    GRANTID_BIN=target/debug/grantid PYTHONPATH=STUBS python -m unittest test_service
"""

import os
import re
import signal
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.request

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from grantid.v1 import grantid_pb2 as pb
from grantid.v1 import grantid_pb2_grpc as rpc
from hispeeddesign.idgen.v1 import id_generator_pb2 as design_pb
from hispeeddesign.idgen.v1 import id_generator_pb2_grpc as design_rpc

BIN = os.environ.get("GRANTID_BIN", "target/debug/grantid")
EPOCH_MS = 1767225600000  # the default layout's epoch, 2026-01-01
SEQUENCE_BITS, WORKER_BITS = 12, 10


def free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One `grantid serve` process."""

    def __init__(self, *extra, state=None, port=None, namespace="py", authority=None,
                 credentials=None):
        self.dir = tempfile.mkdtemp(prefix="grantid-serve-")
        self.state = state or os.path.join(self.dir, "state.json")
        authority = authority or f"file:{self.state}"
        self.port = port or free_port()
        self.log_path = os.path.join(self.dir, "server.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--listen", f"127.0.0.1:{self.port}",
             "--authority", authority, "--namespace", namespace, *extra],
            stdout=self.log, stderr=subprocess.STDOUT)
        if credentials is None:
            self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        else:
            self.channel = tls_channel(self.port, credentials)
        self.ids = rpc.IdGeneratorServiceStub(self.channel)
        self.grants = rpc.GrantServiceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.wait_serving()

    def status(self, service=""):
        return self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status

    def wait_serving(self, limit=20.0):
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.text()}")
            try:
                if self.status() == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not SERVING within {limit}s: {self.text()}")

    def text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, limit=10.0):
        self.channel.close()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=limit)
        self.log.close()
        return rc


def code_of(call):
    try:
        call()
    except grpc.RpcError as e:
        return e.code(), e.details(), dict(e.trailing_metadata() or ())
    raise AssertionError("the call succeeded")


def decode(id_):
    ts = id_ >> (WORKER_BITS + SEQUENCE_BITS)
    worker = (id_ >> SEQUENCE_BITS) & ((1 << WORKER_BITS) - 1)
    return ts, worker


def tls_channel(port, credentials):
    """A TLS channel to 127.0.0.1:port, checking the name `localhost`."""
    return grpc.secure_channel(
        f"127.0.0.1:{port}", credentials,
        options=[("grpc.ssl_target_name_override", "localhost")])


class Pki:
    """A throwaway CA, a server certificate (localhost, 127.0.0.1) and a
    client certificate, as PEM files in a temporary directory."""

    def __init__(self):
        import datetime
        import ipaddress
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        self.dir = tempfile.mkdtemp(prefix="grantid-pki-")
        now = datetime.datetime.now(datetime.timezone.utc)

        def name(cn):
            return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

        def cert(subject, key, issuer, issuer_key, ca=False, sans=None):
            b = (x509.CertificateBuilder().subject_name(name(subject))
                 .issuer_name(name(issuer)).public_key(key.public_key())
                 .serial_number(x509.random_serial_number())
                 .not_valid_before(now - datetime.timedelta(hours=1))
                 .not_valid_after(now + datetime.timedelta(days=1))
                 .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
            if sans:
                b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
            return b.sign(issuer_key, hashes.SHA256())

        def write(file, data):
            path = os.path.join(self.dir, file)
            with open(path, "wb") as f:
                f.write(data)
            return data

        def key_pem(key):
            return key.private_bytes(serialization.Encoding.PEM,
                                     serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())

        pem = serialization.Encoding.PEM
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = cert("grantid test CA", ca_key, "grantid test CA", ca_key, ca=True)
        self.ca = write("ca.pem", ca.public_bytes(pem))
        server_key = ec.generate_private_key(ec.SECP256R1())
        sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        write("server.pem", cert("server", server_key, "grantid test CA", ca_key,
                                 sans=sans).public_bytes(pem))
        write("server.key", key_pem(server_key))
        client_key = ec.generate_private_key(ec.SECP256R1())
        self.client_cert = write("client.pem", cert("client", client_key, "grantid test CA",
                                                    ca_key).public_bytes(pem))
        self.client_key = write("client.key", key_pem(client_key))

    def path(self, file):
        return os.path.join(self.dir, file)


TOKEN = "python-token-0123456789abcdef"
TOKEN_OTHER = "python-other-0123456789abcdef"


class TlsTest(unittest.TestCase):
    """TLS with client certificates (mTLS) and bearer tokens: grpcio's
    ssl_channel_credentials and call metadata."""

    @classmethod
    def setUpClass(cls):
        cls.pki = Pki()
        tokens = cls.pki.path("tokens")
        with open(tokens, "w") as f:
            f.write(f"# every namespace\n{TOKEN}\n{TOKEN_OTHER} other\n")
        cls.credentials = grpc.ssl_channel_credentials(
            root_certificates=cls.pki.ca, private_key=cls.pki.client_key,
            certificate_chain=cls.pki.client_cert)
        # Health answers without a token: the server is waited for with it.
        cls.server = Server("--tls-cert", cls.pki.path("server.pem"),
                            "--tls-key", cls.pki.path("server.key"),
                            "--tls-client-ca", cls.pki.path("ca.pem"),
                            "--token-file", tokens, credentials=cls.credentials)

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_ids_with_a_token(self):
        auth = [("authorization", f"Bearer {TOKEN}")]
        r = self.server.ids.GenerateId(pb.GenerateIdRequest(), metadata=auth)
        self.assertGreater(r.id, 0)
        b = self.server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=1000), metadata=auth)
        self.assertEqual(len(set(b.ids)), 1000)
        self.assertNotIn(r.id, b.ids)

    def test_no_token_or_an_unknown_one_is_unauthenticated(self):
        for metadata in [(), [("authorization", "Bearer not-a-token-of-the-server")],
                         [("authorization", f"Basic {TOKEN}")]]:
            code, details, _ = code_of(
                lambda: self.server.ids.GenerateId(pb.GenerateIdRequest(), metadata=metadata))
            self.assertEqual(code, grpc.StatusCode.UNAUTHENTICATED, details)
            self.assertNotIn(TOKEN, details)
        code, _, _ = code_of(lambda: self.server.grants.Limits(pb.LimitsRequest()))
        self.assertEqual(code, grpc.StatusCode.UNAUTHENTICATED)

    def test_a_token_of_another_namespace_is_permission_denied(self):
        auth = [("authorization", f"Bearer {TOKEN_OTHER}")]
        code, details, _ = code_of(
            lambda: self.server.ids.GenerateId(pb.GenerateIdRequest(), metadata=auth))
        self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED, details)
        self.assertIn('"py"', details)
        code, _, _ = code_of(lambda: self.server.grants.Init(pb.InitRequest(), metadata=auth))
        self.assertEqual(code, grpc.StatusCode.PERMISSION_DENIED)

    def test_the_design_service_takes_the_same_tokens(self):
        ids = design_rpc.IdGeneratorServiceStub(self.server.channel)
        r = ids.GenerateId(design_pb.GenerateIdRequest(),
                           metadata=[("authorization", f"Bearer {TOKEN}")])
        self.assertGreater(r.id, 0)
        for metadata, want in ([(), grpc.StatusCode.UNAUTHENTICATED],
                               [[("authorization", f"Bearer {TOKEN_OTHER}")],
                                grpc.StatusCode.PERMISSION_DENIED]):
            code, _, _ = code_of(
                lambda: ids.GenerateIdBatch(design_pb.GenerateIdBatchRequest(count=3),
                                            metadata=metadata))
            self.assertEqual(code, want)

    def test_health_needs_no_token(self):
        self.assertEqual(self.server.status(), health_pb2.HealthCheckResponse.SERVING)

    def test_no_client_certificate_or_plaintext_is_refused(self):
        no_cert = tls_channel(self.server.port,
                              grpc.ssl_channel_credentials(root_certificates=self.pki.ca))
        plain = grpc.insecure_channel(f"127.0.0.1:{self.server.port}")
        for channel in (no_cert, plain):
            with channel:
                stub = health_pb2_grpc.HealthStub(channel)
                code, _, _ = code_of(
                    lambda: stub.Check(health_pb2.HealthCheckRequest(), timeout=2))
                self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)


class RegionTest(unittest.TestCase):
    """A region's server: --datacenter-bits 5 and an authority URL with datacenter=3."""

    def test_datacenter_and_worker_within_it(self):
        d = tempfile.mkdtemp(prefix="grantid-serve-dc-")
        server = Server("--datacenter-bits", "5",
                        authority=f"file:{os.path.join(d, 'state.json')}?datacenter=3")
        try:
            r = server.ids.GenerateId(pb.GenerateIdRequest())
            _, worker = decode(r.id)
            self.assertEqual(r.datacenter_id, 3)
            self.assertEqual(worker >> 5, 3)
            self.assertEqual(r.worker_id, worker & 31)
            b = server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=10))
            self.assertEqual(b.layout.datacenter_bits, 5)
        finally:
            assert server.stop() == 0


class IdServiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def test_generate_id_fields(self):
        before = int(time.time() * 1000)
        r = self.server.ids.GenerateId(pb.GenerateIdRequest(caller_service="orders"))
        after = int(time.time() * 1000)
        self.assertGreater(r.id, 0)
        self.assertEqual(r.id_str, str(r.id))
        ts, worker = decode(r.id)
        self.assertEqual(r.timestamp_ms, EPOCH_MS + ts)
        # The ID's time is the generator's cursor: within max_drift (100 ms)
        # of the clock.
        self.assertLessEqual(before - 100, r.timestamp_ms)
        self.assertLessEqual(r.timestamp_ms, after + 100)
        self.assertEqual(r.worker_id, worker)
        self.assertEqual(r.datacenter_id, 0)
        self.assertEqual(r.namespace, "py")

    def test_batch(self):
        for n in (1, 7, 1000):
            r = self.server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=n, caller_service="etl"))
            self.assertEqual(len(r.ids), n)
            self.assertEqual(list(r.ids_str), [str(i) for i in r.ids])
            self.assertEqual(list(r.ids), sorted(set(r.ids)))
            self.assertEqual(r.epoch_offset_ms, EPOCH_MS)
            self.assertEqual((r.layout.timestamp_bits, r.layout.worker_bits, r.layout.sequence_bits,
                              r.layout.epoch_ms, r.layout.tick_ms), (41, 10, 12, EPOCH_MS, 1))

    def test_ids_are_unique_across_concurrent_clients(self):
        seen, lock, errors = [], threading.Lock(), []

        def client():
            mine = []
            try:
                for _ in range(300):
                    mine.append(self.server.ids.GenerateId(pb.GenerateIdRequest()).id)
                for _ in range(5):
                    mine.extend(self.server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=1000)).ids)
            except grpc.RpcError as e:
                errors.append(e)
            with lock:
                seen.extend(mine)

        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(seen), 8 * (300 + 5000))
        self.assertEqual(len(set(seen)), len(seen), "duplicate IDs")

    def test_bad_counts_are_invalid_argument(self):
        for n in (-1, 0, 1001, -(2**31), 2**31 - 1):
            code, details, meta = code_of(
                lambda: self.server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=n)))
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, n)
            self.assertIn(f"got {n}", details)
            self.assertEqual(meta.get("grantid-code"), "INVALID_ARGUMENT")
        self.server.ids.GenerateId(pb.GenerateIdRequest())  # still serving

    def test_huge_strings_are_invalid_argument(self):
        huge = "x" * (1 << 20)
        code, details, _ = code_of(lambda: self.server.ids.GenerateId(pb.GenerateIdRequest(caller_service=huge)))
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("caller_service", details)
        code, _, _ = code_of(lambda: self.server.ids.GenerateIdBatch(
            pb.GenerateIdBatchRequest(count=1, caller_service=huge)))
        self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT)
        # Past the transport's 4 MiB message limit: refused by tonic.
        code, _, _ = code_of(lambda: self.server.ids.GenerateId(
            pb.GenerateIdRequest(caller_service="y" * (5 << 20))))
        self.assertEqual(code, grpc.StatusCode.OUT_OF_RANGE)
        self.server.ids.GenerateId(pb.GenerateIdRequest())

    def test_another_namespace_is_not_found(self):
        code, details, _ = code_of(lambda: self.server.ids.GenerateId(pb.GenerateIdRequest(namespace="other")))
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("other", details)
        r = self.server.ids.GenerateId(pb.GenerateIdRequest(namespace="py"))
        self.assertEqual(r.namespace, "py")

    def test_bytes_that_are_not_protobuf(self):
        raw = self.server.channel.unary_unary(
            "/grantid.v1.IdGeneratorService/GenerateId",
            request_serializer=lambda b: b, response_deserializer=lambda b: b)
        for garbage in (b"\xff\xff\xff\xff", b"\x0a\x05\xff\xfe\xfd\xfc\xfb", b"\x08" + b"\xff" * 11):
            code, _, _ = code_of(lambda: raw(garbage))
            self.assertEqual(code, grpc.StatusCode.INTERNAL, garbage)
        unknown = self.server.channel.unary_unary("/grantid.v1.IdGeneratorService/Nope",
                                                  request_serializer=lambda b: b,
                                                  response_deserializer=lambda b: b)
        self.assertEqual(code_of(lambda: unknown(b""))[0], grpc.StatusCode.UNIMPLEMENTED)
        self.server.ids.GenerateId(pb.GenerateIdRequest())

    def test_health(self):
        ok = health_pb2.HealthCheckResponse.SERVING
        self.assertEqual(self.server.status(""), ok)
        self.assertEqual(self.server.status("grantid.v1.IdGeneratorService"), ok)
        self.assertEqual(self.server.status("hispeeddesign.idgen.v1.IdGeneratorService"), ok)
        self.assertEqual(self.server.status("grantid.v1.GrantService"), ok)
        code, _, _ = code_of(lambda: self.server.status("no.such.Service"))
        self.assertEqual(code, grpc.StatusCode.NOT_FOUND)

    def test_reflection_lists_the_services(self):
        db = ProtoReflectionDescriptorDatabase(self.server.channel)
        services = set(db.get_services())
        for name in ("grantid.v1.IdGeneratorService", "grantid.v1.GrantService",
                     "hispeeddesign.idgen.v1.IdGeneratorService", "grpc.health.v1.Health"):
            self.assertIn(name, services)
        desc = db.FindFileContainingSymbol("grantid.v1.GenerateIdResponse")
        self.assertEqual(desc.package, "grantid.v1")
        # The design's own file, as published: its response has its 5 fields.
        desc = db.FindFileContainingSymbol("hispeeddesign.idgen.v1.GenerateIdResponse")
        self.assertEqual((desc.package, desc.name),
                         ("hispeeddesign.idgen.v1", "hispeeddesign/idgen/v1/id_generator.proto"))
        fields = [f.name for f in desc.message_type[1].field]
        self.assertEqual(fields, ["id", "id_str", "timestamp_ms", "datacenter_id", "worker_id"])

    def test_the_design_contract_from_its_own_file(self):
        """A client generated from the service design's id_generator.proto,
        unchanged: the same generator as grantid.v1's, so IDs from both
        services never repeat."""
        ids = design_rpc.IdGeneratorServiceStub(self.server.channel)
        before = int(time.time() * 1000)
        r = ids.GenerateId(design_pb.GenerateIdRequest(caller_service="orders"))
        self.assertGreater(r.id, 0)
        self.assertEqual(r.id_str, str(r.id))
        ts, worker = decode(r.id)
        self.assertEqual(r.timestamp_ms, EPOCH_MS + ts)
        self.assertLessEqual(before - 100, r.timestamp_ms)
        self.assertEqual((r.datacenter_id, r.worker_id), (0, worker))
        b = ids.GenerateIdBatch(design_pb.GenerateIdBatchRequest(count=1000, caller_service="etl"))
        self.assertEqual(list(b.ids), sorted(set(b.ids)))
        self.assertEqual(list(b.ids_str), [str(i) for i in b.ids])
        self.assertEqual(b.epoch_offset_ms, EPOCH_MS)
        self.assertGreater(b.ids[0], r.id)
        theirs = self.server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=1000)).ids
        self.assertEqual(len(set(b.ids) | set(theirs) | {r.id}), 2001)
        for count in (0, 1001, -1):
            code, details, _ = code_of(
                lambda: ids.GenerateIdBatch(design_pb.GenerateIdBatchRequest(count=count)))
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, details)


@unittest.skipUnless(os.environ.get("GRANTID_TEST_DYNAMODB_URL")
                     or os.environ.get("GRANTID_REQUIRE_SERVICES") == "1",
                     "no DynamoDB (GRANTID_TEST_DYNAMODB_URL)")
class DesignOnDynamodbTest(unittest.TestCase):
    """The service design's deployment: its own client (id_generator.proto)
    against `grantid serve` on a DynamoDB table (moto), two servers."""

    def test_two_servers_on_one_table_never_repeat_an_id(self):
        url = os.environ["GRANTID_TEST_DYNAMODB_URL"].replace(
            "grantid_test", f"grantid_design_{os.getpid()}")
        subprocess.run([BIN, "authority", "init", "--new-deployment", url], check=True,
                       capture_output=True)
        servers = [Server(authority=url), Server(authority=url)]
        try:
            seen = set()
            for server in servers:
                ids = design_rpc.IdGeneratorServiceStub(server.channel)
                for _ in range(5):
                    b = ids.GenerateIdBatch(design_pb.GenerateIdBatchRequest(count=1000))
                    seen.update(b.ids)
                r = ids.GenerateId(design_pb.GenerateIdRequest(caller_service="orders"))
                seen.add(r.id)
            self.assertEqual(len(seen), 2 * 5001)
            workers = {decode(i)[1] for i in seen}
            self.assertEqual(len(workers), 2, workers)
        finally:
            for server in servers:
                assert server.stop() == 0


class GrantServiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server(namespace="own")

    @classmethod
    def tearDownClass(cls):
        assert cls.server.stop() == 0

    def request(self, **kw):
        layout = pb.Layout(timestamp_bits=41, worker_bits=4, sequence_bits=12, epoch_ms=EPOCH_MS, tick_ms=1)
        now = int(time.time() * 1000) - EPOCH_MS
        fields = dict(namespace="fleet", incarnation=2**64 - 5, request_id=1, not_before=0,
                      now=now, duration=1000, layout=layout)
        fields.update(kw)
        return pb.AcquireRequest(request=pb.GrantRequest(**fields))

    def test_acquire_retry_renew_lose_release(self):
        g = self.server.grants
        first = g.Acquire(self.request(incarnation=11, request_id=1))
        self.assertEqual(first.WhichOneof("answer"), "granted")
        grant = first.granted
        self.assertEqual((grant.namespace, grant.incarnation), ("fleet", 11))
        self.assertEqual(grant.end - grant.start, 1000)
        # The same (incarnation, request_id) again: the recorded grant.
        again = g.Acquire(self.request(incarnation=11, request_id=1))
        self.assertEqual(again.granted, grant)
        # A renewal continues after the end.
        renewed = g.Acquire(self.request(incarnation=11, request_id=2, worker=grant.worker,
                                         not_before=grant.end)).granted
        self.assertEqual((renewed.worker, renewed.start >= grant.end), (grant.worker, True))
        # Another incarnation renewing that worker: lost.
        other = g.Acquire(self.request(incarnation=12, request_id=1, worker=grant.worker))
        self.assertEqual(other.WhichOneof("answer"), "lost")
        # A new generator gets another worker, disjoint in (worker, time).
        third = g.Acquire(self.request(incarnation=13, request_id=1)).granted
        self.assertNotEqual(third.worker, grant.worker)
        g.Release(pb.ReleaseRequest(grant=renewed))
        # Released: another incarnation may renew it now, after the high-water.
        taken = g.Acquire(self.request(incarnation=12, request_id=2, worker=grant.worker)).granted
        self.assertGreaterEqual(taken.start, renewed.end)

    def test_a_namespace_with_another_layout_is_refused(self):
        g = self.server.grants
        first = g.Acquire(self.request(namespace="layout-py", incarnation=21))
        self.assertEqual(first.WhichOneof("answer"), "granted")
        other = pb.Layout(timestamp_bits=41, worker_bits=5, sequence_bits=11, epoch_ms=EPOCH_MS, tick_ms=1)
        answer = g.Acquire(self.request(namespace="layout-py", incarnation=22, layout=other))
        self.assertEqual(answer.WhichOneof("answer"), "refused")
        self.assertIn("layout", answer.refused)

    def test_malformed_grant_requests(self):
        g = self.server.grants
        cases = [
            pb.AcquireRequest(),
            self.request(namespace=""),
            self.request(duration=0),
            pb.AcquireRequest(request=pb.GrantRequest(namespace="fleet", duration=5)),
            self.request(layout=pb.Layout(timestamp_bits=60, worker_bits=10, sequence_bits=12, tick_ms=1)),
            self.request(layout=pb.Layout(timestamp_bits=41, worker_bits=300, sequence_bits=12, tick_ms=1)),
        ]
        for req in cases:
            code, _, meta = code_of(lambda: g.Acquire(req))
            self.assertEqual(code, grpc.StatusCode.INVALID_ARGUMENT, req)
            self.assertEqual(meta.get("grantid-code"), "INVALID_ARGUMENT")
        self.assertEqual(code_of(lambda: g.Release(pb.ReleaseRequest()))[0], grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(g.Acquire(self.request(incarnation=99)).WhichOneof("answer"), "granted")

    def test_status_and_init(self):
        g = self.server.grants
        granted = g.Acquire(self.request(namespace="status-py", incarnation=77)).granted
        every = g.Status(pb.StatusRequest(), timeout=5).workers
        self.assertIn("own", {w.namespace for w in every})
        mine = g.Status(pb.StatusRequest(namespace="status-py"), timeout=5).workers
        self.assertEqual(len(mine), 1)
        w = mine[0]
        self.assertEqual((w.namespace, w.worker, w.holder), ("status-py", granted.worker, 77))
        self.assertEqual(w.high_water, granted.end)
        self.assertEqual(w.fencing, granted.grant_id)
        self.assertEqual((w.layout.worker_bits, w.layout.tick_ms), (4, 1))
        self.assertTrue(w.HasField("holder"))
        g.Release(pb.ReleaseRequest(grant=granted))
        released = g.Status(pb.StatusRequest(namespace="status-py"), timeout=5).workers[0]
        self.assertFalse(released.HasField("holder"))
        self.assertEqual(list(g.Status(pb.StatusRequest(namespace="none-such")).workers), [])
        self.assertIn("state file", g.Init(pb.InitRequest(), timeout=5).report)

    def test_limits_report_the_authoritys_bounded_lead(self):
        # The file authority's default max_lead_ms.
        limits = self.server.grants.Limits(pb.LimitsRequest(), timeout=5)
        self.assertTrue(limits.HasField("max_lead_ms"))
        self.assertEqual(limits.max_lead_ms, 7000)
        d = tempfile.mkdtemp()
        lead = Server(authority=f"file:{d}/state.json?max_lead_ms=9000", namespace="lead")
        try:
            self.assertEqual(lead.grants.Limits(pb.LimitsRequest(), timeout=5).max_lead_ms, 9000)
        finally:
            self.assertEqual(lead.stop(), 0)
        # static: bounds the grants of its state file (serve needs one).
        static = Server(authority=f"static:1?state={d}/static.json&max_lead_ms=8000", namespace="lead")
        try:
            self.assertEqual(static.grants.Limits(pb.LimitsRequest(), timeout=5).max_lead_ms, 8000)
        finally:
            self.assertEqual(static.stop(), 0)


class EdgeTest(unittest.TestCase):
    def test_no_sequence_left_is_resource_exhausted(self):
        # 2 IDs per 1 s tick: a batch of 1,000 cannot be had within the
        # call's 100 ms deadline.
        server = Server("--sequence-bits", "1", "--tick-ms", "1000")
        try:
            code, details, meta = code_of(
                lambda: server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=1000)))
            self.assertEqual(code, grpc.StatusCode.RESOURCE_EXHAUSTED, details)
            self.assertEqual(meta.get("grantid-code"), "CAPACITY_EXHAUSTED")
            self.assertIn("CAPACITY_EXHAUSTED", details)
            self.assertEqual(server.status(), health_pb2.HealthCheckResponse.SERVING)
        finally:
            self.assertEqual(server.stop(), 0)

    def test_an_address_in_use_stops_the_command(self):
        server = Server()
        try:
            proc = subprocess.run([BIN, "serve", "--listen", f"127.0.0.1:{server.port}",
                                   "--authority", f"file:{server.state}"],
                                  capture_output=True, text=True, timeout=30)
            # A failure, with the status the command gives the kind.
            self.assertNotIn(proc.returncode, (0, None))
            self.assertIn("cannot listen", proc.stderr)
            self.assertIn("INVALID_ARGUMENT", proc.stderr)
            bad = subprocess.run([BIN, "serve", "--listen", "localhost", "--authority", "static:1"],
                                 capture_output=True, text=True, timeout=30)
            self.assertNotIn(bad.returncode, (0, None))
            self.assertIn("--listen", bad.stderr)
        finally:
            self.assertEqual(server.stop(), 0)


class MetricsTest(unittest.TestCase):
    def test_prometheus_text(self):
        mport = free_port()
        server = Server("--metrics", f"127.0.0.1:{mport}")
        try:
            server.ids.GenerateId(pb.GenerateIdRequest())
            server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=10))
            code_of(lambda: server.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=0)))
            time.sleep(0.3)  # the gauges refresh every 100 ms
            text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
        finally:
            self.assertEqual(server.stop(), 0)

        def value(pattern):
            m = re.search(r"^" + pattern + r" (\S+)$", text, re.M)
            self.assertIsNotNone(m, f"{pattern} missing from:\n{text}")
            return float(m.group(1))

        self.assertEqual(value(r'grantid_requests_total\{method="GenerateId",code="OK"\}'), 1)
        self.assertEqual(value(r'grantid_requests_total\{method="GenerateIdBatch",code="OK"\}'), 1)
        self.assertEqual(value(r'grantid_requests_total\{method="GenerateIdBatch",code="INVALID_ARGUMENT"\}'), 1)
        self.assertEqual(value(r"grantid_ids_issued_total"), 11)
        self.assertEqual(value(r'grantid_request_duration_seconds_count\{method="GenerateId"\}'), 1)
        self.assertGreater(value(r"grantid_grant_remaining_seconds"), 0)
        self.assertEqual(value(r"grantid_serving"), 1)
        self.assertGreaterEqual(value(r"grantid_worker"), 0)
        self.assertGreaterEqual(value(r"grantid_grants_acquired_total"), 1)
        self.assertIn("# TYPE grantid_request_duration_seconds histogram", text)


class ShutdownTest(unittest.TestCase):
    def test_sigterm_drains_and_releases(self):
        server = Server("--drain-delay-ms", "400")
        stop, results, lock = threading.Event(), [], threading.Lock()

        def client():
            stub = rpc.IdGeneratorServiceStub(grpc.insecure_channel(f"127.0.0.1:{server.port}"))
            while not stop.is_set():
                try:
                    r = stub.GenerateIdBatch(pb.GenerateIdBatchRequest(count=100), timeout=2)
                    outcome = ("ok", tuple(r.ids))
                except grpc.RpcError as e:
                    outcome = (e.code(), ())
                with lock:
                    results.append(outcome)

        threads = [threading.Thread(target=client) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        server.proc.send_signal(signal.SIGTERM)
        # During the drain delay health says NOT_SERVING and calls still work.
        time.sleep(0.1)
        self.assertEqual(server.status(), health_pb2.HealthCheckResponse.NOT_SERVING)
        served = server.ids.GenerateId(pb.GenerateIdRequest())
        self.assertGreater(served.id, 0)
        t0 = time.monotonic()
        rc = server.proc.wait(timeout=10)
        stop.set()
        for t in threads:
            t.join()
        self.assertEqual(rc, 0)
        self.assertLess(time.monotonic() - t0, 5)
        oks = [ids for outcome, ids in results if outcome == "ok"]
        self.assertGreater(len(oks), 0)
        # Every call either got its IDs or was refused as UNAVAILABLE (no
        # server): none broken half-way, none another error.
        others = {o for o, _ in results if o != "ok"}
        self.assertLessEqual(others, {grpc.StatusCode.UNAVAILABLE})
        every = [i for ids in oks for i in ids] + [served.id]
        self.assertEqual(len(set(every)), len(every))
        log = server.text()
        self.assertIn("event=signal signal=SIGTERM", log)
        self.assertIn("event=closed", log)
        # The worker was released: its lease is free in the state file.
        status = subprocess.run([BIN, "authority", "status", f"file:{server.state}"],
                                capture_output=True, text=True, check=True).stdout
        self.assertRegex(status, r"\bpy\s+\d+\s+\S+\s+(free|expired)\b", status)
        self.assertNotRegex(status, r"\blive\b", status)
        server.log.close()

    def test_sigint_before_any_call(self):
        server = Server()
        self.assertEqual(server.stop(signal.SIGINT), 0)
        self.assertIn("event=signal signal=SIGINT", server.text())

    def test_a_used_up_timestamp_field_stops_the_server(self):
        # 30 timestamp bits of 1 ms (12 days) from 1970: used up long ago. No retry
        # can help, so the server exits (with the command's status for the
        # kind) saying why.
        d = tempfile.mkdtemp()
        proc = subprocess.run([BIN, "serve", "--listen", f"127.0.0.1:{free_port()}",
                               "--authority", f"file:{d}/state.json",
                               "--timestamp-bits", "30", "--epoch-ms", "1"],
                              capture_output=True, text=True, timeout=30)
        self.assertNotIn(proc.returncode, (0, None), proc.stderr)
        self.assertIn("GRANT_EXHAUSTED", proc.stderr)

    def test_not_serving_once_the_committed_grants_run_out(self):
        # Server B takes its grants from server A over grpc://. With A
        # killed, B issues until its committed time (horizon 600 ms) runs
        # out, then says NOT_SERVING and refuses; with A back, B serves again.
        a = Server(namespace="upstream")
        b = Server("--grant-duration-ms", "200", "--horizon-ms", "600",
                   authority=f"grpc://127.0.0.1:{a.port}?timeout_ms=200", namespace="chained")
        try:
            # B reports A's authority's bounded lead.
            self.assertEqual(b.grants.Limits(pb.LimitsRequest(), timeout=5).max_lead_ms, 7000)
            before = b.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=1000)).ids
            a.proc.kill()
            a.proc.wait()
            deadline = time.monotonic() + 5
            while b.status() == health_pb2.HealthCheckResponse.SERVING:
                self.assertLess(time.monotonic(), deadline, "still SERVING 5 s after the authority died")
                time.sleep(0.05)
            code, details, meta = code_of(lambda: b.ids.GenerateId(pb.GenerateIdRequest()))
            self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(meta.get("grantid-code"), "UNAVAILABLE")
            a2 = Server(namespace="upstream", state=a.state, port=a.port)
            try:
                b.wait_serving(limit=10)
                after = b.ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=1000)).ids
                self.assertEqual(len(set(before) | set(after)), 2000)
            finally:
                self.assertEqual(a2.stop(), 0)
        finally:
            self.assertEqual(b.stop(), 0)
            a.log.close()

    def test_not_serving_while_the_authority_is_unusable(self):
        # A file authority whose directory cannot be created: no grant, so
        # health stays NOT_SERVING and calls are UNAVAILABLE with the reason.
        d = tempfile.mkdtemp()
        blocker = os.path.join(d, "file")
        open(blocker, "w").close()
        port = free_port()
        proc = subprocess.Popen([BIN, "serve", "--listen", f"127.0.0.1:{port}",
                                 "--authority", f"file:{blocker}/sub/state.json", "--startup-timeout-ms", "300"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            grpc.channel_ready_future(channel).result(timeout=10)
            health = health_pb2_grpc.HealthStub(channel)
            self.assertEqual(health.Check(health_pb2.HealthCheckRequest()).status,
                             health_pb2.HealthCheckResponse.NOT_SERVING)
            time.sleep(0.5)
            code, details, meta = code_of(
                lambda: rpc.IdGeneratorServiceStub(channel).GenerateId(pb.GenerateIdRequest()))
            self.assertEqual(code, grpc.StatusCode.UNAVAILABLE)
            self.assertIn("no grant yet", details)
            self.assertEqual(meta.get("grantid-code"), "UNAVAILABLE")
            channel.close()
        finally:
            proc.send_signal(signal.SIGTERM)
            self.assertEqual(proc.wait(timeout=10), 0)


if __name__ == "__main__":
    unittest.main()
