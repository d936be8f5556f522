"""Tuning campaigns: many ``feinsum tune`` jobs on the devices of a dask.distributed cluster.

:func:`campaign` (``feinsum.campaign``; ``feinsum campaign PLAN`` on the command line) reads
a PLAN (:mod:`~feinsum.campaigns.plan`), runs each job on every device identity it names as
a dask task on a worker that owns such a device (:mod:`~feinsum.campaigns.owner`), never
timing two jobs on one physical device at once, and records every measurement once
(:mod:`~feinsum.campaigns.job`). See ``docs/campaigns.rst``.
"""

from feinsum.campaigns.plan import Job, Plan, parse_plan, read_plan
from feinsum.campaigns.run import CampaignResult, JobResult, campaign

__all__ = ["CampaignResult", "Job", "JobResult", "Plan", "campaign", "parse_plan", "read_plan"]
