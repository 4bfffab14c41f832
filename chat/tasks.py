"""The `tasks` executor: runs execute on Django task workers (`manage.py db_worker`)."""

from asgiref.sync import async_to_sync
from django.tasks import task


@task()
def execute_run_task(run_id: str) -> str:
    from chat.executor import execute_run

    return async_to_sync(execute_run)(run_id)
