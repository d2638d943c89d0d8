//! A TCP relay on a loopback port that the test owns: it forwards every connection to a target
//! port, and can be cut (every connection closed, new ones refused) or pointed elsewhere (as
//! a managed Redis's endpoint moves to a promoted replica, or a replica's link to its primary
//! breaks).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

pub struct Relay {
    pub port: u16,
    /// Where new connections go; `None` while cut.
    target: Arc<Mutex<Option<u16>>>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Relay {
    pub fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let relay = Relay {
            port,
            target: Arc::new(Mutex::new(Some(target))),
            open: Arc::default(),
        };
        let (target, open) = (relay.target.clone(), relay.open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Some(to) = *target.lock().unwrap() else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let Ok(server) = TcpStream::connect(("127.0.0.1", to)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let _ = (client.set_nodelay(true), server.set_nodelay(true));
                {
                    let mut open = open.lock().unwrap();
                    open.push(client.try_clone().unwrap());
                    open.push(server.try_clone().unwrap());
                }
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server, client);
            }
        });
        relay
    }

    /// Close every connection through it, and refuse new ones until [`Relay::point`].
    pub fn cut(&self) {
        *self.target.lock().unwrap() = None;
        self.close_all();
    }

    /// Close every connection through it; new ones go to `target`.
    pub fn point(&self, target: u16) {
        *self.target.lock().unwrap() = Some(target);
        self.close_all();
    }

    /// New connections go to `target`; those open stay where they are (as when a DNS name
    /// moves: a client's open connections still reach the old address).
    pub fn point_new(&self, target: u16) {
        *self.target.lock().unwrap() = Some(target);
    }

    fn close_all(&self) {
        for s in self.open.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.cut();
    }
}

/// Copy `from` to `to` until either ends, then close both.
fn pipe(mut from: TcpStream, mut to: TcpStream) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = from.shutdown(Shutdown::Both);
        let _ = to.shutdown(Shutdown::Both);
    });
}
