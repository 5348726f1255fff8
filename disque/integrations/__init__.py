"""Framework brokers on disque.client (docs/frameworks.md): `disque.integrations.kombu` (the
`disque://` transport of kombu, hence Celery) and `disque.integrations.dramatiq`
(`DisqueBroker`). Installed with the extras `[celery]` and `[dramatiq]`."""
