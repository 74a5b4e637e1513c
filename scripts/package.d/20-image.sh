# Container image tests: scripts/image.sh builds the OCI archive (the static
# musl `grantid` in an image FROM scratch), then what the archive carries is
# checked and run: its configuration (non-root user, entrypoint, command,
# ports, labels), files and size (at most 25 MB unpacked); the archive is
# unpacked into a container (`buildah from oci-archive:`, `buildah mount`)
# and its /grantid runs there as the image says (its user, environment,
# entrypoint and command, chroot into the container's files): the version,
# TLS roots from the image's CA bundle, and `serve` on a file: authority on
# free ports, which answers the official Python gRPC client (Health
# SERVING, GenerateId, a batch, metrics) as uid 65532 and exits 0 on
# SIGTERM. (`buildah run --isolation chroot` runs the image too, but
# buildah 1.28 loses the last output of a process that exits at once, about
# one run in 50, so the test starts the process itself.) The Kubernetes
# example (deploy/kubernetes/) is checked by kubernetes-validate (PyPI)
# and by the rules of docs/SERVICE.md, "Kubernetes"; it is not run on a
# cluster.
# Budget: the musl release build (about 7 minutes cold on 2 busy cores,
# seconds warm) and under a minute for the rest.
. scripts/lib/image.sh
. scripts/lib/grpcio.sh
if ! command -v ss >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2
fi
dist=$CARGO_TARGET_DIR/image-test/dist
GRANTID_DIST=$dist ./scripts/image.sh
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
archive=$dist/grantid-image-$version.oci.tar
work=$(mktemp -d /tmp/grantid-image.XXXXXX)
ctr=
server=
cleanup() {
  [ -z "$server" ] || kill -9 "$server" 2>/dev/null || true
  [ -z "$ctr" ] || buildah_ rm "$ctr" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "image: $*" >&2; exit 1; }

echo "--- image: configuration, contents and size of $(basename "$archive")"
# The archive's index, manifest, config and layers, read as they ship.
python3 - "$archive" "$version" "$work" <<'EOF'
import gzip, io, json, sys, tarfile
archive, version, work = sys.argv[1:]
outer = tarfile.open(archive)
def blob(digest):
    return outer.extractfile("blobs/sha256/" + digest.split(":", 1)[1]).read()
index = json.load(outer.extractfile("index.json"))
manifest = json.loads(blob(index["manifests"][0]["digest"]))
config = json.loads(blob(manifest["config"]["digest"]))["config"]
assert config.get("User") == "65532:65532", f"the image runs as {config.get('User')!r}"
assert config["Entrypoint"] == ["/grantid"], config["Entrypoint"]
cmd = config["Cmd"]
assert cmd[0] == "serve" and "0.0.0.0:50051" in cmd, cmd
assert set(config["ExposedPorts"]) == {"50051/tcp", "9464/tcp"}, config["ExposedPorts"]
assert "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" in config["Env"], config["Env"]
labels = config["Labels"]
assert labels["org.opencontainers.image.version"] == version, labels
assert labels["org.opencontainers.image.licenses"] == "MIT OR Apache-2.0", labels
assert "org.opencontainers.image.source" in labels, labels
files, unpacked = {}, 0
for layer in manifest["layers"]:
    data = blob(layer["digest"])
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    unpacked += len(data)
    for m in tarfile.open(fileobj=io.BytesIO(data)):
        files[m.name.lstrip("./").rstrip("/")] = m
def owned(name, uid, mode):
    m = files.get(name)
    assert m is not None, f"{name} is not in the image: {sorted(files)}"
    assert (m.uid, m.gid, m.mode & 0o7777) == (uid, uid, mode), (name, m.uid, m.gid, oct(m.mode))
owned("grantid", 0, 0o755)
owned("var", 0, 0o755)
owned("var/lib", 0, 0o755)
owned("etc/ssl/certs/ca-certificates.crt", 0, 0o644)
owned("usr/share/doc/grantid/LICENSE-MIT", 0, 0o644)
owned("usr/share/doc/grantid/LICENSE-APACHE", 0, 0o644)
owned("var/lib/grantid", 65532, 0o755)
assert files["etc/ssl/certs/ca-certificates.crt"].size > 100_000
size = 25_000_000
print(f"image: {unpacked} bytes unpacked ({unpacked / 1e6:.1f} MB, limit {size / 1e6:.0f} MB), "
      f"archive {outer.fileobj.seek(0, 2)} bytes, {len(files)} entries, user {config['User']}")
assert unpacked <= size, f"the image is {unpacked} bytes unpacked, over {size}"
# What a runtime takes from the config: the user, the environment, and the
# entrypoint and command, one argument or variable a line.
open(work + "/user", "w").write(config["User"])
open(work + "/env", "w").write("".join(e + "\n" for e in config["Env"]))
open(work + "/command", "w").write("".join(a + "\n" for a in config["Entrypoint"] + cmd))
EOF

echo "--- image: a container from the archive"
buildah_ containers --quiet --all | while read -r old; do buildah_ rm "$old" >/dev/null; done
ctr=$(buildah_ from --quiet "oci-archive:$archive")
rootfs=$(buildah_ mount "$ctr")
# The container's /dev/shm (a tmpfs every runtime mounts): the file
# authority keeps its state-loss sidecar there.
mkdir -p "$rootfs/dev/shm" && chmod 1777 "$rootfs/dev/shm"
mapfile -t image_env <"$work/env"
chroot=$(command -v chroot)
# run [VAR=VALUE...] -- ARGS...: execs ARGS in the container, as its user,
# with its environment (and VAR=VALUE), nothing of the host's; called only
# in a subshell (`$(run ...)`, `run ... &`).
run() {
  local extra=()
  while [ "$1" != -- ]; do extra+=("$1"); shift; done
  shift
  exec env -i "${image_env[@]}" "${extra[@]}" "$chroot" --userspec="$(cat "$work/user")" "$rootfs" "$@"
}
[ "$(run -- /grantid --version)" = "grantid $version" ] || fail "grantid --version: $(run -- /grantid --version)"
# The CA bundle is what TLS finds (sslrootcert=system, through SSL_CERT_FILE):
# the URL is taken and the connection tried; without the bundle the URL is
# refused before any connection.
roots='postgres://grantid@127.0.0.1:1/ids?sslrootcert=system&timeout_ms=300'
out=$(run -- /grantid authority status "$roots" 2>&1) && fail "status on port 1 succeeded: $out"
case "$out" in *"Connection refused"*) ;; *) fail "sslrootcert=system in the image: $out" ;; esac
out=$(run SSL_CERT_FILE=/nonexistent -- /grantid authority status "$roots" 2>&1) && fail "$out"
case "$out" in *"no trusted root certificate"*) ;; *) fail "without the bundle: $out" ;; esac

echo "--- image: its own command, serve on a file: authority, against grpcio"
stubs=$work/stubs
grpcio_client "$stubs"
free_port() { "$GRPCIO_PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port=$(free_port)
metrics=$(free_port)
# The image's entrypoint and command as they are, on free ports.
mapfile -t image_command < <(sed -e "s/:50051\$/:$port/" -e "s/:9464\$/:$metrics/" "$work/command")
run GRANTID_AUTHORITY=file:/var/lib/grantid/state.json -- "${image_command[@]}" >"$work/serve.log" 2>&1 &
server=$!
PYTHONPATH=$stubs "$GRPCIO_PYTHON" - "$port" "$metrics" <<'EOF' || { cat "$work/serve.log" >&2; exit 1; }
import re, sys, time, urllib.request
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grantid.v1 import grantid_pb2 as pb, grantid_pb2_grpc as rpc
port, metrics = sys.argv[1:]
channel = grpc.insecure_channel(f"127.0.0.1:{port}")
health = health_pb2_grpc.HealthStub(channel)
deadline = time.monotonic() + 30
while True:
    try:
        status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=1).status
    except grpc.RpcError as e:
        status = e.code()
    if status == health_pb2.HealthCheckResponse.SERVING:
        break
    assert time.monotonic() < deadline, f"health of '' is {status} after 30 s"
    time.sleep(0.2)
for service in ("grantid.v1.IdGeneratorService", "grantid.v1.GrantService"):
    assert health.Check(health_pb2.HealthCheckRequest(service=service), timeout=2).status == \
        health_pb2.HealthCheckResponse.SERVING, service
ids = rpc.IdGeneratorServiceStub(channel)
one = ids.GenerateId(pb.GenerateIdRequest(caller_service="image-test"), timeout=2)
assert one.id > 0 and one.id_str == str(one.id), one
batch = ids.GenerateIdBatch(pb.GenerateIdBatchRequest(count=100), timeout=2).ids
assert len(batch) == 100 and list(batch) == sorted(set(batch)) and batch[0] > one.id
text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=2).read().decode()
assert re.search(r"^grantid_serving 1$", text, re.M), text
print(f"image: health SERVING, GenerateId {one.id} (worker {one.worker_id}), 100 more, metrics")
EOF
[ "$(ss -Hltnp "sport = :$port" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1)" = "$server" ] ||
  fail "the server (pid $server) does not listen on $port: $(ss -Hltnp "sport = :$port")"
[ "$(readlink "/proc/$server/root")" = "$rootfs" ] || fail "the server does not run in the container's files"
ids=$(awk '/^(Uid|Gid):/ {print $2, $3, $4, $5}' "/proc/$server/status" | sort -u)
[ "$ids" = "65532 65532 65532 65532" ] || fail "the server runs as uid/gid $ids, not 65532"
state=$rootfs/var/lib/grantid/state.json
[ "$(stat -c %u:%g "$state")" = 65532:65532 ] || fail "state.json is $(stat -c %u:%g "$state")"
echo "image: serve runs as uid 65532 gid 65532 (pid $server)"
kill -TERM "$server"
rc=0
wait "$server" || rc=$?
server=
[ "$rc" = 0 ] || { cat "$work/serve.log" >&2; fail "serve exited $rc after SIGTERM"; }
grep -q 'event=stopped' "$work/serve.log" || { cat "$work/serve.log" >&2; fail "no event=stopped"; }
if grep -q 'event=sidecar_unusable' "$work/serve.log"; then
  cat "$work/serve.log" >&2
  fail "the file authority found no usable sidecar directory"
fi
buildah_ umount "$ctr" >/dev/null

echo "--- image: the Kubernetes example (schemas and rules, no cluster)"
venv=$GRANTID_TOOLS/kubernetes-validate-1.37.0
if ! "$venv/bin/kubernetes-validate" --version >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check kubernetes-validate==1.37.0
fi
"$venv/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml
"$venv/bin/python" - "$version" deploy/kubernetes/grantid.yaml deploy/kubernetes/secret.example.yaml <<'EOF'
import sys, yaml
version, manifests, secrets = sys.argv[1:]
docs = {d["kind"]: d for d in yaml.safe_load_all(open(manifests))}
deployment, service, pdb = docs["Deployment"], docs["Service"], docs["PodDisruptionBudget"]
pod = deployment["spec"]["template"]["spec"]
(c,) = pod["containers"]
args = dict(a[2:].split("=", 1) for a in c["args"][1:])
assert c["args"][0] == "serve", c["args"]
assert c["image"].endswith(f"/grantid:{version}"), c["image"]
# The drain ends before the kubelet's SIGKILL.
drain_ms = int(args["drain-delay-ms"]) + int(args["drain-timeout-ms"])
assert pod["terminationGracePeriodSeconds"] * 1000 > drain_ms, (pod["terminationGracePeriodSeconds"], drain_ms)
assert int(args["drain-delay-ms"]) > 0
# Probes on the gRPC health service: ready on "", alive on GrantService.
port = int(args["listen"].rsplit(":", 1)[1])
ready, alive = c["readinessProbe"]["grpc"], c["livenessProbe"]["grpc"]
assert ready == {"port": port, "service": ""}, ready
assert alive == {"port": port, "service": "grantid.v1.GrantService"}, alive
live = c["livenessProbe"]
assert live["periodSeconds"] * live["failureThreshold"] * 1000 > drain_ms, live
assert {p["containerPort"] for p in c["ports"]} == {port, int(args["metrics"].rsplit(":", 1)[1])}
# Non-root, read-only root file system.
assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 65532
sc = c["securityContext"]
assert sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"] and sc["capabilities"]["drop"] == ["ALL"], sc
# The authority from a Secret; replicas share it, so it is a network one.
(env,) = [e for e in c["env"] if e["name"] == "GRANTID_AUTHORITY"]
ref = env["valueFrom"]["secretKeyRef"]
secret = {d["metadata"]["name"]: d for d in yaml.safe_load_all(open(secrets))}[ref["name"]]
url = secret["stringData"][ref["key"]]
assert "authority" not in args, "the authority is on the command line, not from the Secret"
if deployment["spec"]["replicas"] >= 2:
    assert url.split(":", 1)[0] in ("postgres", "postgresql", "redis", "rediss", "mysql", "mariadb", "etcd"), url
tls = {v["name"]: v for v in pod["volumes"]}
mounts = {m["name"]: m for m in c["volumeMounts"]}
for name, v in tls.items():
    assert "secret" in v and mounts[name]["readOnly"], (name, v)
assert any(m["mountPath"] in url for m in mounts.values()), url
# The Service and the budget select the Deployment's pods.
labels = deployment["spec"]["template"]["metadata"]["labels"]
assert service["spec"]["selector"].items() <= labels.items()
assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
assert 0 < pdb["spec"]["minAvailable"] < deployment["spec"]["replicas"]
print(f"kubernetes: {len(docs)} objects, grace {pod['terminationGracePeriodSeconds']} s > drain {drain_ms} ms")
EOF
echo "image tests: ok"
