"""The `tasks` executor: runs execute on Django task workers (`manage.py db_worker`)."""

from asgiref.sync import async_to_sync
from django.tasks import task

from chat.executor.run import execute_run


@task()
def execute_run_task(run_id: str) -> str:
    return async_to_sync(execute_run)(run_id)
