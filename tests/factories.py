"""factory-boy factories. Tasks are created directly in a given state (test
set-up, not a transition); every move under test goes through the lifecycle."""

from __future__ import annotations

import uuid
from datetime import timedelta

import factory
from django.utils import timezone

from queues.models import DeadLetterTask, Queue, Status, Task


class QueueFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Queue
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"queue_{n}")
    max_retries = 3


class TaskFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Task
        skip_postgeneration_save = True  # the related DLQ row needs no second save of the task

    queue = factory.SubFactory(QueueFactory)
    payload = factory.LazyFunction(lambda: {"n": uuid.uuid4().hex[:8]})
    status = Status.PENDING
    priority = 5
    # "Due" and "expired" are judged by Postgres' now(), which inside a test's transaction is
    # the moment the transaction began: past-dated set-ups keep a wide margin so a test that
    # runs slowly (a busy machine) still sees them as due.
    scheduled_at = factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=1))
    created_at = factory.LazyFunction(timezone.now)
    updated_at = factory.LazyFunction(timezone.now)
    status_changed_at = factory.LazyFunction(timezone.now)
    max_retries = 3

    class Params:
        claimed = factory.Trait(
            status=Status.CLAIMED,
            claimed_by="worker-1",
            claimed_at=factory.LazyFunction(timezone.now),
            lease_token=factory.LazyFunction(lambda: uuid.uuid4().hex),
            lease_expires_at=factory.LazyFunction(lambda: timezone.now() + timedelta(seconds=30)),
            attempts=1,
        )
        expired_lease = factory.Trait(
            status=Status.EXECUTING,
            claimed_by="worker-1",
            claimed_at=factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=3)),
            heartbeat_at=factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=2)),
            lease_token=factory.LazyFunction(lambda: uuid.uuid4().hex),
            lease_expires_at=factory.LazyFunction(lambda: timezone.now() - timedelta(seconds=90)),
            attempts=1,
        )
        dead = factory.Trait(
            status=Status.DEAD,
            attempts=4,
            last_error="boom",
            dead_letter=factory.RelatedFactory("tests.factories.DeadLetterFactory", factory_related_name="task"),
        )
        retry_due = factory.Trait(
            status=Status.RETRY,
            attempts=1,
            scheduled_at=factory.LazyFunction(lambda: timezone.now() - timedelta(minutes=1)),
        )
        done = factory.Trait(
            status=Status.DONE,
            attempts=1,
            finished_at=factory.LazyFunction(timezone.now),
        )


class DeadLetterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DeadLetterTask

    task = factory.SubFactory(TaskFactory, dead=False, status=Status.DEAD)
    queue = factory.LazyAttribute(lambda o: o.task.queue)
    payload = factory.LazyAttribute(lambda o: o.task.payload)
    last_error = "boom"
    attempts = factory.LazyAttribute(lambda o: o.task.attempts)
    died_at = factory.LazyFunction(timezone.now)
