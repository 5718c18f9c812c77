"""The Amazon SQS-compatible endpoint (docs/sqs.rst).

``POST /`` (and ``/<account id>/<queue>``) speaks both SQS wire protocols over
Queuey's own storage, so every SQS client works with ``endpoint_url`` pointed
at Queuey:

* :mod:`.sigv4` verifies AWS Signature Version 4 (header and query string);
* :mod:`.api` is the table of SQS actions: each one's shapes (botocore's
  model of SQS), handler and permission class;
* :mod:`.protocol` reads a request in AWS JSON 1.0 or the query protocol and
  writes the answer (JSON, or XML through :mod:`.query`);
* :mod:`.errors` holds SQS's error codes and statuses;
* :mod:`.actions` does each action with the storage and work-queue service;
* :mod:`.views` wires it into Pyramid.
"""
