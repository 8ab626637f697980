"""The job: lines in, first occurrences out (`urlseen dedup`): streams, line keys, the loop."""
