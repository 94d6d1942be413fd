"""``POST /api/v1/jobs/{id}/checkpoint/``: a member of the job's team (or the job itself, with their token)
says the running attempt has just saved its work. Thin: the rules are in scheduler/services/checkpoints.py."""

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.access import job_for
from scheduler.services.checkpoints import NotRunning, job_checkpoint
from scheduler.services.jobs import NotAllowed


class JobCheckpointAPI(APIView):
    """Record a checkpoint of the job's running attempt at the portal's now: a later preemption loses only
    the work after it, and that work is credited back to the team. 404 for a job of another team, 403 for a
    platform admin outside the team, 409 when the job is not running."""

    @extend_schema(request=None, responses={200: dict, 403: dict, 404: dict, 409: dict})
    def post(self, request, job_id: int):
        job = job_for(request.user, job_id)
        try:
            job = job_checkpoint(user=request.user, job=job)
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None
        except NotRunning as exc:
            return Response({"detail": str(exc), "field": "state"}, status=status.HTTP_409_CONFLICT)
        return Response({"job_id": job.pk, "attempt": job.attempt, "state": job.state,
                         "last_checkpoint_at": job.last_checkpoint_at})
