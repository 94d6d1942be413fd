"""factory_boy factories for the domain models (no fixture files)."""

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from portal.models import Membership, Team
from scheduler.models import Gpu, GpuModel, Node, Pool, PriorityClass, Quota


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-Example-123")


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"team{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    team = factory.SubFactory(TeamFactory)
    role = Membership.MEMBER


class GpuModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = GpuModel
        django_get_or_create = ("name",)

    name = "h100-80gb"
    memory_mb = 81559


class PoolFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Pool
        django_get_or_create = ("name",)

    name = "train"


class PriorityClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PriorityClass
        django_get_or_create = ("name",)

    name = "training"
    value = 500
    grace_period_s = 2


class NodeFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Node

    name = factory.Sequence(lambda n: f"node{n}")
    pool = factory.SubFactory(PoolFactory)
    state = Node.READY


class GpuFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Gpu

    node = factory.SubFactory(NodeFactory)
    index = factory.Sequence(lambda n: n)
    uuid = factory.Sequence(lambda n: f"GPU-test-{n:08d}")
    model = factory.SubFactory(GpuModelFactory)
    memory_mb = 81559


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    team = factory.SubFactory(TeamFactory)
    gpu_model = factory.SubFactory(GpuModelFactory)
    guaranteed = Decimal(4)
    limit = Decimal(8)
