"""The service core: the domain's rules and services, below every door.

The REST API (:mod:`queuey.web`), the SQS endpoint (:mod:`queuey.sqs`), the
admin pages (:mod:`queuey.admin`), the CLI (:mod:`queuey.cli`) and Spark
(:mod:`queuey.spark`) are adapters: they parse a request, call the core and
answer. The core speaks the vocabulary of :mod:`queuey.model` and stores
through :mod:`queuey.storage`; it imports no door.
"""
