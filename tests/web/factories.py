"""factory_boy factories for the web side."""
import factory
from django.contrib.auth import get_user_model

from opdweb.jobs.models import Job
from opdweb.teams.models import Membership, Role, Team

PASSWORD = "correct horse battery staple"


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.PostGenerationMethodCall("set_password", PASSWORD)

    @factory.post_generation
    def save_password(obj, create, extracted, **kwargs):
        if create:
            obj.save()


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"Team {n}")
    slug = factory.Sequence(lambda n: f"team-{n}")


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    team = factory.SubFactory(TeamFactory)
    user = factory.SubFactory(UserFactory)
    role = Role.MEMBER


class JobFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Job

    team = factory.SubFactory(TeamFactory)
    kind = "selftest"
    config = factory.LazyFunction(lambda: {"steps": 10, "sleep_s": 0.0, "fail_at_step": None, "log_every": None})
