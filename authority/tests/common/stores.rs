//! Stores of one test's own: a state file, a PostgreSQL and a MariaDB
//! database, a Redis database index, a throwaway etcd, a table on the test
//! DynamoDB (moto), each declared a new deployment and removed at the end
//! (a table stays until moto stops). A fence or a quarantine holds a
//! whole store, so a test that starts one must not share its store.

use grantid_authority::open;

/// The engines of the registry's table that hold no state of their own,
/// and where they are tested instead.
pub const NOT_STORES: [(&str, &str); 1] = [(
    "grpc",
    "a client of `grantid serve`, whose own authority is one of the others: cli/tests/serve*.rs",
)];

/// The engines [`store`] makes a store of: every engine of the table this
/// build has, but [`NOT_STORES`], in the table's order.
pub fn engines() -> Vec<&'static str> {
    grantid_authority::engines()
        .filter(|e| e.built && !NOT_STORES.iter().any(|(n, _)| *n == e.name))
        .map(|e| e.name)
        .collect()
}

/// Panics unless `covered` (what a suite runs on, in any build) names
/// every engine of the registry's table, built here or not, but
/// [`NOT_STORES`] and `elsewhere` (engine, where it is tested instead).
#[allow(dead_code)]
pub fn assert_covers(suite: &str, covered: &[&str], elsewhere: &[(&str, &str)]) {
    let stores = grantid_authority::engines()
        .map(|e| e.name)
        .filter(|n| !NOT_STORES.iter().any(|(s, _)| s == n));
    for name in stores {
        assert!(
            covered.contains(&name) || elsewhere.iter().any(|(n, _)| *n == name),
            "{suite} does not run on engine {name:?} of the registry's table: add it"
        );
    }
}

/// One store of the test, and what removes it.
pub struct Store {
    pub name: &'static str,
    pub url: String,
    pub _guard: Option<Box<dyn std::any::Any>>,
}

/// A PostgreSQL database dropped at the end.
struct PgDatabase {
    admin: postgres::Client,
    name: String,
}

impl Drop for PgDatabase {
    fn drop(&mut self) {
        let _ = self
            .admin
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name));
    }
}

/// A MariaDB database dropped at the end.
struct MysqlDatabase {
    server: String,
    name: String,
}

impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        super::mariadb_cli(&self.server, &format!("DROP DATABASE {}", self.name));
    }
}

/// Stores of every engine this machine has ([`store`]).
pub fn stores(tag: &str, redis_db: u8) -> Vec<Store> {
    engines()
        .into_iter()
        .filter_map(|e| store(e, tag, redis_db))
        .collect()
}

/// A store of engine `name` (one of [`engines`]) used by this test alone,
/// declared a new deployment; `None` when the machine has no such server
/// (skip: [`super::service`] says so, or fails under
/// `GRANTID_REQUIRE_SERVICES=1`). `redis_db` picks the test's Redis
/// database index, emptied first.
pub fn store(name: &str, tag: &str, redis_db: u8) -> Option<Store> {
    let db = format!("grantid_{tag}_{:x}", super::random() >> 16).replace('-', "_");
    let store = match name {
        "file" => Store {
            name: "file",
            url: format!("file:{}", super::temp_path(tag).display()),
            _guard: None,
        },
        "static" => Store {
            name: "static",
            url: format!("static:1?state={}", super::temp_path(tag).display()),
            _guard: None,
        },
        "postgres" => {
            let url = super::postgres_url()?;
            let mut admin = postgres::Client::connect(&url, postgres::NoTls).unwrap();
            admin
                .batch_execute(&format!("CREATE DATABASE {db}"))
                .unwrap();
            let base = url.split('?').next().unwrap();
            Store {
                name: "postgres",
                url: format!("{}/{db}", base.rsplit_once('/').unwrap().0),
                _guard: Some(Box::new(PgDatabase { admin, name: db })),
            }
        }
        "redis" => {
            let url = super::redis_url()?;
            let url = format!("{}/{redis_db}", url.trim_end_matches('/'));
            let client = redis::Client::open(url.as_str()).unwrap();
            let mut c = client.get_connection().unwrap();
            redis::cmd("FLUSHDB").query::<()>(&mut c).unwrap();
            Store {
                name: "redis",
                url,
                _guard: None,
            }
        }
        "mysql" => {
            let url = super::mysql_url()?;
            super::mariadb_cli(&url, &format!("CREATE DATABASE {db}"));
            let base = url.split('?').next().unwrap();
            Store {
                name: "mysql",
                url: format!("{}/{db}", base.rsplit_once('/').unwrap().0),
                _guard: Some(Box::new(MysqlDatabase {
                    server: url.clone(),
                    name: db,
                })),
            }
        }
        #[cfg(feature = "etcd")]
        "etcd" => {
            super::etcd_url()?;
            let scratch = super::Scratch::new(tag);
            let server = super::etcd(&scratch.0).expect("a throwaway etcd");
            Store {
                name: "etcd",
                url: format!("etcd://127.0.0.1:{}", server.port),
                _guard: Some(Box::new((server, scratch))),
            }
        }
        #[cfg(not(feature = "etcd"))]
        "etcd" => return None,
        #[cfg(feature = "dynamodb")]
        "dynamodb" => Store {
            name: "dynamodb",
            url: format!(
                "dynamodb://{db}?region=us-east-1&endpoint={}",
                super::dynamodb_endpoint()?
            ),
            _guard: None,
        },
        #[cfg(not(feature = "dynamodb"))]
        "dynamodb" => return None,
        other => panic!(
            "engine {other:?} of the registry's table has no test store: add one to \
             authority/tests/common/stores.rs"
        ),
    };
    open(&store.url).unwrap().init_new_deployment().unwrap();
    Some(store)
}
