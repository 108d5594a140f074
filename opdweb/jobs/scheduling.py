"""Which job a free worker takes next, and where a queued job stands.

Every message carries a broker priority, 0 taken first (kombu's Redis transport keeps one
list per step and pops the lowest step that holds a message; FIFO within a step):

- **Interactive work goes first.** A kind a person waits on (``JobKind.interactive``: an
  admission check, a measurement, drift, selftest, describe) sends at 0-4; everything
  else (training, scans, noise solves, calibrations and every child job a parent made)
  at 5-9.  A worker that frees up takes a waiting measurement before the next training run.
- **A fair share.** Within its class a job sends one step later for each job of that class
  its person already has queued, and one more for every four its team has queued, up to
  the class's last step: one person's fifteen calibration runs do not hold back a
  teammate's first, and one team's backlog does not hold back another team's.

A priority orders waiting messages; a running job keeps its worker, with one exception:
**a training run makes way.**  When an interactive job has waited ``JOB_PREEMPT_AFTER_SECONDS``
on its queue (no worker was free to take it), one running job of a kind that can stop and
resume exactly (``JobKind.preemptible``: training saves its checkpoint, optimizer and RNG
state when asked to stop) stops at its next step, is queued again behind it, and resumes
from that checkpoint later.  One running job makes way per waiting job (a claim in Redis).
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import timedelta

import redis
from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from opdweb.jobs.models import Job, JobState
from workers.science.entrypoints import KINDS, get_kind

INTERACTIVE_FIRST, BATCH_FIRST, LAST = 0, 5, 9
#: Finished jobs of a kind whose run times give its typical duration.
HISTORY = 20


def is_interactive(job: Job) -> bool:
    """A person waits on it: an interactive kind submitted by a person, not a parent's child."""
    return get_kind(job.kind).interactive and job.parent_id is None


def kinds_on(queue: str) -> list[str]:
    return [name for name, kind in KINDS.items() if kind.queue == queue]


def priority_of(job: Job) -> int:
    """The broker priority to send ``job``'s message with now (module docstring)."""
    kinds = kinds_on(get_kind(job.kind).queue)
    interactive = Q(kind__in=[k for k in kinds if KINDS[k].interactive], parent__isnull=True)
    if is_interactive(job):
        first, last, same_class = INTERACTIVE_FIRST, BATCH_FIRST - 1, interactive
    else:
        first, last, same_class = BATCH_FIRST, LAST, Q(kind__in=kinds) & ~interactive
    queued = Job.objects.filter(same_class, state=JobState.QUEUED, team_id=job.team_id).exclude(pk=job.pk)
    mine = queued.filter(created_by_id=job.created_by_id).count()
    return min(last, first + mine + queued.count() // 4)


@dataclass(frozen=True)
class QueuePlace:
    """Where a queued job stands on its queue."""
    queue: str
    position: int  # 1 = the next message a free worker takes
    running: int  # jobs running on the queue now (about as many workers are busy)
    ahead_mine: int  # of the job's own team
    ahead_others: int  # of other teams (not named: the queue is shared, the jobs are theirs)
    start_in_s: float | None  # None when a job ahead (or running) has no finished job of its kind to go by
    basis: str  # how the estimate was made, in words

    @property
    def start_in_words(self) -> str:
        if self.start_in_s is None:
            return "no estimate"
        minutes = self.start_in_s / 60
        return "about a minute" if minutes < 1.5 else f"about {minutes:.0f} minutes"


def typical_seconds(kind: str, team_id: int) -> float | None:
    """The median run time of the team's last :data:`HISTORY` successful ``kind`` jobs."""
    spans = (Job.objects.filter(team_id=team_id, kind=kind, state=JobState.SUCCEEDED, started_at__isnull=False,
                                finished_at__isnull=False)
             .order_by("-finished_at").values_list("started_at", "finished_at")[:HISTORY])
    seconds = [(end - start).total_seconds() for start, end in spans]
    return statistics.median(seconds) if seconds else None


def queue_place(job: Job) -> QueuePlace | None:
    """Where queued ``job`` stands: the messages a free worker takes before it (a lower
    priority, or the same one sent earlier), and when it may start, from the typical run
    time of each kind ahead and what the running jobs have left, shared among the workers
    that are busy.  None when the job is not queued."""
    if job.state != JobState.QUEUED:
        return None
    queue = get_kind(job.kind).queue
    kinds = kinds_on(queue)
    queued = Job.objects.filter(state=JobState.QUEUED, kind__in=kinds)
    ahead = list(queued.filter(Q(priority__lt=job.priority) | Q(priority=job.priority, created_at__lt=job.created_at))
                 .exclude(pk=job.pk).order_by("priority", "created_at"))
    running = list(Job.objects.filter(state=JobState.RUNNING, kind__in=kinds))
    typical: dict[tuple[str, int], float | None] = {}

    def usual(other: Job) -> float | None:
        key = (other.kind, other.team_id)
        if key not in typical:
            typical[key] = typical_seconds(*key)
        return typical[key]

    # A parent that is queued or running only looks at its children for a moment.
    parents = set(Job.objects.filter(parent__in=[o.pk for o in running + ahead]).values_list("parent", flat=True))
    busy = [o for o in running if o.pk not in parents]
    work, unknown = 0.0, []
    now = timezone.now()
    for other in busy + [o for o in ahead if o.pk not in parents]:
        total = usual(other)
        if total is None:
            unknown.append(other.kind)
        elif other.state == JobState.RUNNING:  # what it has left
            done = (now - (other.started_at or now)).total_seconds()
            work += max(total - done, total * (1.0 - other.progress), 0.0)
        else:
            work += total
    workers = max(1, len(busy))
    if unknown:
        start_in, basis = None, f"no {', '.join(sorted(set(unknown)))} job of the team has finished yet"
    else:
        start_in = work / workers
        basis = (f"the median run time of each kind ahead over the team's last {HISTORY} of it, shared among "
                 f"{workers} busy worker(s)")
    mine = sum(1 for other in ahead if other.team_id == job.team_id)
    return QueuePlace(queue=queue, position=len(ahead) + 1, running=len(running), ahead_mine=mine,
                      ahead_others=len(ahead) - mine, start_in_s=start_in, basis=basis)


def next_up(queue: str, limit: int = 10) -> list[Job]:
    """The queued jobs of ``queue`` in the order free workers take them."""
    return list(Job.objects.filter(state=JobState.QUEUED, kind__in=kinds_on(queue))
                .select_related("team", "created_by").order_by("priority", "created_at")[:limit])


def claim_preemption(queue: str) -> int | None:
    """An interactive job on ``queue`` that has waited ``JOB_PREEMPT_AFTER_SECONDS`` with no
    worker free to take it and no running job making way for it yet, claimed for the
    caller, which then makes way; its id, or None."""
    after = settings.JOB_PREEMPT_AFTER_SECONDS
    if after < 0:
        return None
    cutoff = timezone.now() - timedelta(seconds=after)
    waiting = (Job.objects.filter(state=JobState.QUEUED, parent__isnull=True, created_at__lt=cutoff,
                                  kind__in=[k for k in kinds_on(queue) if KINDS[k].interactive])
               .order_by("priority", "created_at").values_list("pk", "created_at")[:20])
    if not waiting:
        return None
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        for pk, created in waiting:
            # Named by creation time too: a database made afresh (tests, benchmarks) reuses ids.
            if client.set(f"{settings.CHANNEL_PREFIX}.making-way-for.{pk}.{created.timestamp()}", "1", nx=True,
                          ex=3600):
                return pk
    except redis.RedisError:
        return None  # no claim without Redis: the running job carries on
    finally:
        client.close()
    return None


def parents_to_recheck(older_than_s: float) -> list[int]:
    """Waiting parents no child woke for ``older_than_s`` seconds (a wake lost with a worker
    killed at the wrong moment): the reaper wakes them to look again."""
    cutoff = timezone.now() - timedelta(seconds=older_than_s)
    return list(Job.objects.filter(state=JobState.WAITING, heartbeat_at__lt=cutoff).values_list("pk", flat=True))


__all__ = ["QueuePlace", "claim_preemption", "is_interactive", "next_up", "parents_to_recheck", "priority_of",
           "queue_place", "typical_seconds"]
