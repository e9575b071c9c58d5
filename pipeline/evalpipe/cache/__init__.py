"""The answer cache across runs: a job pays once per content, not once per run."""

from evalpipe.cache.answers import JobCache, open_job_cache
from evalpipe.cache.store import DAY, CacheUnusable, Store, cache_file

__all__ = ["DAY", "CacheUnusable", "JobCache", "Store", "cache_file", "open_job_cache"]
