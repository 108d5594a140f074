"""Make the buckets the settings name (``OPDWEB_CHECKPOINT_URIS``, an ``s3://``
``OPDWEB_ARTIFACT_ROOT``) on the store of ``S3_ENDPOINT_URL`` where they are missing: the
first start of a compose stack or a new store.  A second run changes nothing."""
from django.conf import settings
from django.core.management.base import BaseCommand

from workers.science.checkpoints import s3
from workers.science.checkpoints.uri import is_remote, parse


def named_buckets() -> list[str]:
    uris = [*settings.OPDWEB_CHECKPOINT_URIS, str(settings.OPDWEB_ARTIFACT_ROOT)]
    return sorted({parse(uri).bucket for uri in uris if is_remote(uri)})


class Command(BaseCommand):
    help = "Make the S3 buckets the checkpoint and artifact settings name, where missing."

    def handle(self, *args, **options):
        from botocore.exceptions import ClientError

        client = s3.client()
        for bucket in named_buckets():
            try:
                client.head_bucket(Bucket=bucket)
                continue
            except ClientError:
                pass
            client.create_bucket(Bucket=bucket)
            self.stdout.write(f"made bucket {bucket}")
