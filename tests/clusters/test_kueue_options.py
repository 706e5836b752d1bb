"""A Kubernetes cluster in Kueue mode must say which LocalQueue jobs go to: the cluster form and the actions
refuse Kueue mode without ``local_queue`` or ``local_queues`` (docs/kueue.md), naming the options."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from clusters import actions
from clusters.backends import kinds
from clusters.models import Cluster
from tests.conftest import World

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({}, ""),
        ({"kueue": False}, ""),
        ({"kueue": True, "local_queue": "lq-research"}, ""),
        ({"kueue": "yes", "local_queues": {"nlp": "lq-nlp"}}, ""),
        ({"kueue": True, "local_queues": {"nlp": "lq-nlp"}, "local_queue": "lq-default"}, ""),
        ({"kueue": True}, "In Kueue mode jobs go to a LocalQueue: set local_queues"),
        ({"kueue": "true", "local_queue": ""}, "In Kueue mode jobs go to a LocalQueue"),
        ({"kueue": True, "local_queues": {}}, "In Kueue mode jobs go to a LocalQueue"),
        ({"kueue": "ture", "local_queue": "lq"}, "kueue is true or false."),
        ({"kueue": True, "local_queues": ["lq-nlp"]}, "local_queues maps Quartermaster queue names"),
        ({"kueue": True, "local_queues": {"nlp": "LQ NLP"}}, "local_queues maps Quartermaster queue names"),
        ({"kueue": True, "local_queue": 7}, "local_queue is the name of a Kueue LocalQueue"),
    ],
)
def test_kueue_options_are_checked(options: dict[str, Any], words: str) -> None:
    problem = kinds.get("kubernetes").check_options(options)
    assert problem.startswith(words) if words else problem == ""


def new_cluster(options: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "Kube Kueue",
        "slug": "",
        "kind": "kubernetes",
        "endpoint": "https://k8s.example.org:6443",
        "region": "us-east",
        "levels": "",
        "options": json.dumps({"namespace": "research", **options}),
        "preference": "50",
        "kubernetes_token": "kube-bearer-s3cr3t",
        "kubernetes_ca_cert": "",
    }


def test_the_cluster_form_refuses_kueue_mode_without_a_local_queue(world: World) -> None:
    adam = Client()
    adam.force_login(world.users["adam"])
    response = adam.post("/clusters/new/", new_cluster({"kueue": True}))
    assert response.status_code == 400
    (error,) = response.context["form"].errors["options"]
    assert "local_queues" in error
    assert "local_queue" in error
    assert not Cluster.objects.filter(slug="kube-kueue").exists()

    response = adam.post("/clusters/new/", new_cluster({"kueue": True, "local_queues": {"nlp": "lq-nlp"}}))
    assert response.status_code == 302
    assert Cluster.objects.get(slug="kube-kueue").options["local_queues"] == {"nlp": "lq-nlp"}


def test_the_actions_refuse_turning_kueue_on_without_a_local_queue(world: World) -> None:
    adam = world.users["adam"]
    cluster = actions.create_cluster(
        adam,
        world.org,
        name="Kube",
        kind="kubernetes",
        endpoint="https://k8s.example.org:6443",
        region="eu",
        levels=[],
        options={"namespace": "research"},
        preference=50,
        credentials={"token": "t"},
    )
    with pytest.raises(ValidationError) as caught:
        actions.update_cluster(adam, cluster, options={"namespace": "research", "kueue": True})
    assert "In Kueue mode jobs go to a LocalQueue" in caught.value.message_dict["options"][0]
