"""The job list's view of the jobs: filters, sort and page read from the query string, so
a URL is the whole view and can be shared.  Bad values are refused (400) with the
accepted ones named, never ignored silently."""
from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import Count, Q, QuerySet

from opdweb.jobs.models import TERMINAL_STATES, Job, JobState
from opdweb.jobs.summaries import summary, with_result_keys
from opdweb.refusals import Refused
from workers.science.entrypoints import KINDS
from workers.science.kinds import EXTERNAL_KINDS

PAGE_SIZE = 50

# Column name in the URL -> model field it sorts by; the job id breaks ties.
SORT_FIELDS = {"id": "id", "kind": "kind", "state": "state", "created": "created_at",
               "user": "created_by__username", "name": "name"}
DEFAULT_SORT = "-created"
#: Every kind a job may have: the runnable ones, then those that report in from outside.
LISTED_KINDS: tuple[str, ...] = (*KINDS, *EXTERNAL_KINDS)
FILTERS = ("kind", "state", "model", "user", "q", "children")
# What a row shows: reading only these keeps a sort over thousands of jobs in memory
# (whole rows, with configs and results, made PostgreSQL sort on disk).
ROW_FIELDS = ("id", "kind", "name", "state", "progress", "created_at", "team__slug", "created_by__username")


@dataclass(frozen=True)
class JobListView:
    """One view of the list: ``filters`` (only those given), ``sort`` (a column of
    :data:`SORT_FIELDS`, ``-`` first for descending) and the page number asked for."""

    filters: dict[str, str]
    sort: str
    page: str

    @classmethod
    def from_query(cls, query) -> JobListView:
        filters = {name: query.get(name, "").strip() for name in FILTERS}
        filters = {name: value for name, value in filters.items() if value}
        if filters.get("kind") and filters["kind"] not in LISTED_KINDS:
            raise Refused(f"unknown kind {filters['kind']!r}; kinds are {', '.join(LISTED_KINDS)}")
        if filters.get("state") and filters["state"] not in JobState.values:
            raise Refused(f"unknown state {filters['state']!r}; states are {', '.join(JobState.values)}")
        if filters.get("children") not in (None, "shown"):
            raise Refused(f"children: {filters['children']!r} is not a choice; give children=shown to list child jobs "
                          "beside their parents")
        sort = query.get("sort") or DEFAULT_SORT
        if sort.removeprefix("-") not in SORT_FIELDS:
            raise Refused(f"cannot sort by {sort!r}; columns are {', '.join(SORT_FIELDS)} ('-' first for descending)")
        return cls(filters, sort, query.get("page", "1"))

    def apply(self, jobs: QuerySet[Job]) -> QuerySet[Job]:
        """The jobs of this view; child jobs (a calibration's runs) are folded under their
        parent unless ``children=shown``."""
        f = self.filters
        if "children" not in f:
            jobs = jobs.filter(parent__isnull=True)
        if "kind" in f:
            jobs = jobs.filter(kind=f["kind"])
        if "state" in f:
            jobs = jobs.filter(state=f["state"])
        if "model" in f:
            jobs = jobs.filter(config__model__icontains=f["model"])
        if "user" in f:
            jobs = jobs.filter(created_by__username=f["user"])
        if "q" in f:
            jobs = jobs.filter(name__icontains=f["q"])
        field = SORT_FIELDS[self.sort.removeprefix("-")]
        descending = self.sort.startswith("-")
        jobs = with_result_keys(jobs.select_related("team", "created_by").only(*ROW_FIELDS))
        return jobs.order_by(f"-{field}" if descending else field, "-id" if descending else "id")

    def page_of(self, jobs: QuerySet[Job]) -> Page:
        """The page asked for; each job on it carries ``summary`` (its result in a few words)
        and ``children_total`` / ``children_done`` (its child jobs, counted in one query)."""
        page = Paginator(self.apply(jobs), PAGE_SIZE).get_page(self.page)
        counts = {row["parent_id"]: row for row in Job.objects.filter(parent_id__in=[j.pk for j in page.object_list])
                  .values("parent_id").annotate(total=Count("id"),
                                                done=Count("id", filter=Q(state__in=TERMINAL_STATES)))}
        for job in page.object_list:
            job.summary = summary(job)
            row = counts.get(job.pk, {})
            job.children_total, job.children_done = row.get("total", 0), row.get("done", 0)
        return page

    def url(self, **changes: str) -> str:
        """The query string of this view with ``changes`` (an empty value drops a
        parameter); any change but the page goes back to page 1."""
        params = {**self.filters, "sort": self.sort, "page": self.page, **changes}
        if "page" not in changes:
            params.pop("page")
        if params.get("sort") == DEFAULT_SORT:
            params.pop("sort")
        return "?" + urlencode({k: v for k, v in params.items() if v})

    def sort_link(self, column: str) -> str:
        """Sorting by ``column``: ascending first, descending when it is already ascending."""
        return self.url(sort=f"-{column}" if self.sort == column else column)
