//! Replicated acknowledgements (`--only acked`): Submit+Release cycles at 64 in flight on an
//! authority with `store.redis.replicas_acked: 1` against one without, both on one redis-server
//! with one replica, which this scenario starts on loopback ports and stops (its own pair,
//! whatever `--redis-url` says). The rounds alternate the arms; beside the ratio, the p50 one
//! cycle at a time and redis-server's CPU per cycle (the primary's and the replica's).

use super::*;

/// A redis-server on a free loopback port, with `extra` arguments, stopped when dropped.
struct Redis {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Redis {
    fn start(dir: &std::path::Path, extra: &[&str]) -> Redis {
        let port = envoy::free_port();
        let dir = dir.join(format!("redis-{port}"));
        std::fs::create_dir_all(&dir).unwrap();
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--port", &port.to_string()])
            .arg("--dir")
            .arg(&dir)
            .args(extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server on PATH");
        Redis { child, port, dir }
    }

    async fn conn(&self) -> redis::aio::MultiplexedConnection {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}/0", self.port)).unwrap();
        for _ in 0..200 {
            if let Ok(c) = client.get_multiplexed_async_connection().await {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("redis-server on {} did not start", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(crate) async fn acked(a: &Args, dir: &std::path::Path) {
    let primary = Redis::start(dir, &[]);
    let replica = Redis::start(
        dir,
        &["--replicaof", "127.0.0.1", &primary.port.to_string()],
    );
    let (mut p, mut r) = (primary.conn().await, replica.conn().await);
    for _ in 0..400 {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut r)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let server = |name: &str, acked: u32| {
        let config = dir.join(format!("acked-{name}.yaml"));
        std::fs::write(
            &config,
            format!(
                "{CONFIG}store:\n  redis: {{ url: \"redis://127.0.0.1:{}/0\", prefix: \"{name}:\", replicas_acked: {acked} }}\n",
                primary.port
            ),
        )
        .unwrap();
        Server::start(&config)
    };
    let (plain, acked) = (server("plain", 0), server("acked", 1));
    let (plain_chans, acked_chans) = (
        channels(&plain.addr, 2).await,
        channels(&acked.addr, 2).await,
    );
    let mut rounds = Vec::new();
    for _ in 0..a.rounds {
        let without = arm(&plain, &plain_chans, &mut p, &mut r, a.seconds).await;
        let with = arm(&acked, &acked_chans, &mut p, &mut r, a.seconds).await;
        rounds.push((with.0.rate / without.0.rate, (without, with)));
    }
    let (ratio, ((pf, pr), (af, ar))) = median(rounds);
    let one = |chans: Vec<Channel>| async move {
        submit_release(&chans, "free", api::SubmitMode::Queue, 1, a.seconds, "one")
            .await
            .1
    };
    let (one_plain, one_acked) = (one(plain_chans).await, one(acked_chans).await);
    println!(
        "Submit+Release cycles at 64 with replicas_acked: 1 (one replica) {ratio:.2} × without ({}): {:.0} against {:.0} cycles/s; p50 at 64 {:.2} against {:.2} ms; one at a time p50 {:.3} against {:.3} ms (+{:.3} ms); authority CPU {:.1} against {:.1} µs per cycle; redis-server CPU per cycle: primary {:.1} against {:.1} µs, replica {:.1} against {:.1} µs",
        at_least(ratio, 0.7),
        af.rate,
        pf.rate,
        af.p50_ms,
        pf.p50_ms,
        one_acked.p50_ms,
        one_plain.p50_ms,
        one_acked.p50_ms - one_plain.p50_ms,
        af.cpu_us.unwrap_or(0.0),
        pf.cpu_us.unwrap_or(0.0),
        ar.0,
        pr.0,
        ar.1,
        pr.1,
    );
}

/// Cycles at 64 on `server`: its figures, and redis-server's CPU µs per cycle (the primary's,
/// the replica's).
async fn arm(
    server: &Server,
    chans: &[Channel],
    p: &mut redis::aio::MultiplexedConnection,
    r: &mut redis::aio::MultiplexedConnection,
    seconds: f64,
) -> (Figures, (f64, f64)) {
    let before = (redis_cpu(p).await, redis_cpu(r).await);
    let (_, f) = metered(
        server,
        submit_release(chans, "free", api::SubmitMode::Queue, 64, seconds, "c"),
        |(_, f)| f.rate * seconds,
        |(_, f), u| f.cpu_us = Some(u),
    )
    .await;
    let cycles = f.rate * seconds;
    let redis_us = (
        (redis_cpu(p).await - before.0) * 1e6 / cycles,
        (redis_cpu(r).await - before.1) * 1e6 / cycles,
    );
    (f, redis_us)
}

async fn redis_cpu(c: &mut redis::aio::MultiplexedConnection) -> f64 {
    on_redis::redis_cpu_secs(c).await
}
