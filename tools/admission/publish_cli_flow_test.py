"""The command lines end to end: publish --mode=init/add/revoke/rotate/timestamp, and admission_cli
with --repository_url (file://) deciding, signing its decision, then refusing once revoked."""

import io
import json
import os
import subprocess
import sys

import pytest
from google.protobuf import json_format

from tools.admission import admission_cli, decision_summary
from tools.admission.testing import routes
from tools.policy import keys
from tools.policy import policy as policy_lib
from tools.publish.testing import repo as testing_repo


def publish(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-m", "tools.publish.publish_cli", *args], env=env, capture_output=True,
                          text=True, check=False)
    print(proc.stdout, proc.stderr)
    return proc


def admit(tmp_path, *extra):
    out, err = io.StringIO(), io.StringIO()
    code = admission_cli.cli(["admission_cli", f"--policy={tmp_path / 'policy.json'}", f"--route={tmp_path / 'route.json'}",
                              f"--repository_url={(tmp_path / 'repo').as_uri()}", f"--tracker_state_dir={tmp_path / 'tracker'}",
                              f"--bootstrap_root={tmp_path / 'repo' / 'metadata' / '1.root.json'}", *extra], out, err)
    print(out.getvalue(), err.getvalue())
    return code, out.getvalue() + err.getvalue()


def test_publish_cli_and_admission_cli_over_a_repository(tmp_path):
    key_dir = tmp_path / "keys"
    k = {n: keys.generate(n, key_dir) for n in ("root1", "root2", "root3", "issuer", "snapshot", "timestamp", "issuer2", "tracker")}
    issuer = keys.load_private_key(k["issuer"].private_key)
    repo = str(tmp_path / "repo")
    roles = [f"--snapshot_key={k['snapshot'].private_key}", f"--timestamp_key={k['timestamp'].private_key}"]
    assert publish("--mode=init", f"--repository={repo}", *[f"--root_key={k[r].private_key}" for r in ("root1", "root2", "root3")],
                   "--root_threshold=2", f"--targets_key={k['issuer'].private_key}", *roles).returncode == 0
    name, data, report = testing_repo.record_file(issuer)
    (tmp_path / name).write_bytes(data)
    assert publish("--mode=add", f"--repository={repo}", f"--record={tmp_path / name}",
                   f"--targets_key={k['issuer'].private_key}", *roles).returncode == 0
    (tmp_path / "policy.json").write_text(policy_lib.policy_to_json(testing_repo.policy()))
    (tmp_path / "route.json").write_text(json_format.MessageToJson(routes.route_for(report)))
    summary = tmp_path / "decision.intoto.dsse.json"
    code, text = admit(tmp_path, f"--summary_key={k['tracker'].private_key}", f"--summary_out={summary}")
    assert code == admission_cli.EXIT_ROUTABLE, text
    st = decision_summary.verify(json.loads(summary.read_text()), keys.load_public_key(k["tracker"].public_pem))
    assert st["predicate"]["verificationResult"] == "PASSED" and st["predicate"]["lanes"]["inclusion_proofs"]

    # A record signed by a key the repository does not list is refused by the publisher.
    stranger = keys.load_private_key(k["issuer2"].private_key)
    other_name, other, _ = testing_repo.record_file(stranger, lane_id="linux-x86_64-other")
    (tmp_path / other_name).write_bytes(other)
    proc = publish("--mode=add", f"--repository={repo}", f"--record={tmp_path / other_name}",
                   f"--targets_key={k['issuer'].private_key}", *roles)
    assert proc.returncode == 1 and "publish-refused" in proc.stderr

    assert publish("--mode=revoke", f"--repository={repo}", f"--record={tmp_path / name}", "--reason=driver regression",
                   f"--targets_key={k['issuer'].private_key}", *roles).returncode == 0
    code, text = admit(tmp_path)
    assert code == admission_cli.EXIT_REFUSED and "revoked: " in text and "driver regression" in text

    proc = publish("--mode=revoke", f"--repository={repo}", "--reason=ambiguous", f"--targets_key={k['issuer'].private_key}", *roles)
    assert proc.returncode == 1 and "malformed-revocation" in proc.stderr  # names nothing

    assert publish("--mode=rotate", f"--repository={repo}", f"--root_key={k['root1'].private_key}",
                   f"--root_key={k['root2'].private_key}", f"--new_targets_key={k['issuer2'].private_key}", *roles).returncode == 0
    assert publish("--mode=timestamp", f"--repository={repo}", f"--timestamp_key={k['timestamp'].private_key}").returncode == 0
    code, text = admit(tmp_path)
    assert code == admission_cli.EXIT_REFUSED and "revoked: " in text  # still revoked after rotation


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q", "-s", "-p", "no:cacheprovider"]))
