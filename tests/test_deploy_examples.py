"""The Kubernetes example (deploy/kubernetes/specproxy.yaml) holds together: its
config.yaml is one the proxy accepts, its secrets are the ones the config reads, and
the pool's URLs name the StatefulSet's pods."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from app.config import settings_from_mapping

EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "kubernetes" / "specproxy.yaml"


def manifests() -> dict[tuple[str, str], dict[str, Any]]:
    docs = [doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc]
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def test_the_example_config_is_one_the_proxy_accepts() -> None:
    found = manifests()
    text = found["ConfigMap", "specproxy"]["data"]["config.yaml"]
    needed = set(re.findall(r"\$\{(\w+)\}", text))
    header = EXAMPLE.read_text().split("apiVersion", 1)[0]
    created = set(re.findall(r"--from-literal=(\w+)=", header))
    assert needed == created  # the secret the comment creates holds every ${VAR} read
    env = {name: "redis://redis:6379/0" if name == "REDIS_URL" else "k" for name in needed}
    settings = settings_from_mapping(yaml.safe_load(text), env=env)
    assert settings.state.backend == "redis"
    assert settings.speculative_decoding.verify_model == ["cerebras", "backup"]

    pool = settings.models["local"].base_urls
    llama = found["StatefulSet", "llama"]["spec"]
    pods = [f"http://llama-{i}.{llama['serviceName']}:8080" for i in range(llama["replicas"])]
    assert pool == pods
    assert found["Service", "llama"]["spec"]["clusterIP"] == "None"  # a DNS name per pod
    proxy = found["Deployment", "specproxy"]["spec"]["template"]["spec"]["containers"][0]
    assert proxy["envFrom"] == [{"secretRef": {"name": "specproxy"}}]
    assert f"redis://{found['Service', 'redis']['metadata']['name']}:" in header
