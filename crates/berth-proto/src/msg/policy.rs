//! Who may connect as what (docs/msg-protocol.md §2): expected names, per-name rules on
//! transport and source address, anonymous clients, one live connection per name. The decision
//! is a pure function of the keyword, where the client came from, and which names are held, so
//! every engine (and every test) gets the same answer in the same order of checks.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::handshake::{Keyword, Refusal};

/// The kind of listener a client came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A TCP listener.
    Tcp,
    /// A UDP listener.
    Udp,
    /// A UNIX stream socket.
    Unix,
}

impl Transport {
    fn parse(s: &str) -> Option<Transport> {
        match s {
            "tcp" => Some(Transport::Tcp),
            "udp" => Some(Transport::Udp),
            "unix" => Some(Transport::Unix),
            _ => None,
        }
    }
}

/// Where a client came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// The listener's kind.
    pub transport: Transport,
    /// The peer's address; `None` over UNIX sockets.
    pub ip: Option<IpAddr>,
}

/// Constraints on one name. Each one given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rule {
    /// Listener kinds the name may use; empty: any.
    pub transports: Vec<Transport>,
    /// Address ranges the name may connect from (IP transports only); empty: any.
    pub from: Vec<IpNet>,
    /// What a newcomer claiming this name while it is held gets, if not the policy's default.
    pub name_taken: Option<NameTaken>,
}

/// What happens when a client claims a name a live connection holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum NameTaken {
    /// The newcomer is refused with `name-taken` (berth's default: safer).
    #[default]
    Refuse,
    /// The newcomer gets the name; the old connection gets its queued output, then the
    /// `name-replaced` error, and is closed (FI-ASockIOCore's behaviour; what a client
    /// reconnecting after a half-open connection needs).
    Replace,
}

impl NameTaken {
    /// Reads `refuse` or `replace`.
    pub fn parse(s: &str) -> Option<NameTaken> {
        match s {
            "refuse" => Some(NameTaken::Refuse),
            "replace" => Some(NameTaken::Replace),
            _ => None,
        }
    }
}

/// A rule as written on the command line: `NAME:transport=unix,from=127.0.0.0/8`.
pub fn parse_rule(s: &str) -> Result<(String, Rule), String> {
    let (name, spec) = s
        .split_once(':')
        .ok_or_else(|| format!("rule {s:?}: expected NAME:transport=...,from=..."))?;
    if super::handshake::parse_keyword(name.as_bytes()) != Ok(Keyword::Named(name.to_owned())) {
        return Err(format!("rule {s:?}: {name:?} is not a valid client name"));
    }
    let mut rule = Rule::default();
    // `key=v1,v2,key2=v3`: a value without `=` continues the previous key's list.
    let mut key = "";
    for item in spec.split(',').filter(|i| !i.is_empty()) {
        let value = match item.split_once('=') {
            Some((k, v)) => {
                key = k;
                v
            }
            None => item,
        };
        match key {
            "transport" => rule.transports.push(Transport::parse(value).ok_or_else(|| {
                format!("rule {s:?}: unknown transport {value:?} (tcp, udp or unix)")
            })?),
            "name-taken" => {
                rule.name_taken = Some(NameTaken::parse(value).ok_or_else(|| {
                    format!("rule {s:?}: name-taken is refuse or replace, not {value:?}")
                })?)
            }
            "from" => rule.from.push(
                value
                    .parse::<IpNet>()
                    .or_else(|_| value.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("rule {s:?}: {value:?} is not an address or CIDR range")
                    })?,
            ),
            _ => {
                return Err(format!(
                    "rule {s:?}: unknown constraint {key:?} (transport, from, name-taken)"
                ))
            }
        }
    }
    if rule.transports.is_empty() && rule.from.is_empty() && rule.name_taken.is_none() {
        return Err(format!("rule {s:?}: no constraint given"));
    }
    Ok((name.to_owned(), rule))
}

/// How a client was admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// A name given in advance with `--expect`.
    Expected(String),
    /// Any other name.
    Unknown(String),
    /// No name.
    Anonymous,
}

/// A listener's own admission settings (`?anonymous=no`, `?expected-only`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Listener {
    /// Refuse anonymous clients here.
    pub no_anonymous: bool,
    /// Refuse names that were not expected here.
    pub expected_only: bool,
}

/// A server's (or listener's) admission policy.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// Names expected in advance.
    pub expected: HashSet<String>,
    /// Rules by name.
    pub rules: HashMap<String, Rule>,
    /// Refuse anonymous clients.
    pub no_anonymous: bool,
    /// Refuse names that were not expected.
    pub expected_only: bool,
    /// What a newcomer claiming a held name gets (a rule may say otherwise for its name).
    pub name_taken: NameTaken,
}

impl Policy {
    /// Decides on a client, checking in the documented order: anonymous, transport, address,
    /// expected-only, then whether `is_taken` says a live connection holds the name.
    pub fn admit(
        &self,
        keyword: &Keyword,
        peer: Peer,
        is_taken: impl Fn(&str) -> bool,
    ) -> Result<Admission, Refusal> {
        self.admit_on(keyword, peer, Listener::default(), is_taken)
    }

    /// What a newcomer claiming `name` while it is held gets: its rule's choice, else the
    /// policy's.
    pub fn on_taken(&self, name: &str) -> NameTaken {
        self.rules
            .get(name)
            .and_then(|r| r.name_taken)
            .unwrap_or(self.name_taken)
    }

    /// [`Policy::admit`] on a listener with stricter settings of its own (they add to the
    /// policy's, never relax them).
    pub fn admit_on(
        &self,
        keyword: &Keyword,
        peer: Peer,
        listener: Listener,
        is_taken: impl Fn(&str) -> bool,
    ) -> Result<Admission, Refusal> {
        let no_anonymous = self.no_anonymous || listener.no_anonymous;
        let expected_only = self.expected_only || listener.expected_only;
        let name = match keyword {
            Keyword::Anonymous if no_anonymous => return Err(Refusal::AnonymousRefused),
            Keyword::Anonymous => return Ok(Admission::Anonymous),
            Keyword::Named(name) => name,
        };
        if let Some(rule) = self.rules.get(name) {
            if !rule.transports.is_empty() && !rule.transports.contains(&peer.transport) {
                return Err(Refusal::TransportRefused);
            }
            // UNIX peers have no address and are local: `from` does not apply to them.
            if let (false, Some(ip)) = (rule.from.is_empty(), peer.ip) {
                if !rule.from.iter().any(|net| net.contains(&ip)) {
                    return Err(Refusal::AddressRefused);
                }
            }
        }
        let expected = self.expected.contains(name);
        if expected_only && !expected {
            return Err(Refusal::NotExpected);
        }
        if is_taken(name) && self.on_taken(name) == NameTaken::Refuse {
            return Err(Refusal::NameTaken);
        }
        Ok(if expected {
            Admission::Expected(name.clone())
        } else {
            Admission::Unknown(name.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(n: &str) -> Keyword {
        Keyword::Named(n.to_owned())
    }

    fn tcp(ip: &str) -> Peer {
        Peer {
            transport: Transport::Tcp,
            ip: Some(ip.parse().unwrap()),
        }
    }

    const UNIX: Peer = Peer {
        transport: Transport::Unix,
        ip: None,
    };

    fn policy(rules: &[&str]) -> Policy {
        Policy {
            rules: rules.iter().map(|r| parse_rule(r).unwrap()).collect(),
            expected: ["svc".to_owned()].into(),
            ..Policy::default()
        }
    }

    #[test]
    fn rules_restrict_transport_and_address() {
        let p = policy(&["admin:transport=unix", "svc:from=127.0.0.0/8,::1"]);
        let free = |_: &str| false;
        assert_eq!(
            p.admit(&named("admin"), UNIX, free),
            Ok(Admission::Unknown("admin".into()))
        );
        assert_eq!(
            p.admit(&named("admin"), tcp("127.0.0.1"), free),
            Err(Refusal::TransportRefused)
        );
        assert_eq!(
            p.admit(&named("svc"), tcp("127.9.9.9"), free),
            Ok(Admission::Expected("svc".into()))
        );
        assert_eq!(
            p.admit(&named("svc"), tcp("::1"), free),
            Ok(Admission::Expected("svc".into()))
        );
        assert_eq!(
            p.admit(&named("svc"), tcp("10.0.0.1"), free),
            Err(Refusal::AddressRefused)
        );
        // `from` does not apply over UNIX sockets.
        assert_eq!(
            p.admit(&named("svc"), UNIX, free),
            Ok(Admission::Expected("svc".into()))
        );
        assert_eq!(
            p.admit(&named("other"), tcp("10.0.0.1"), free),
            Ok(Admission::Unknown("other".into()))
        );
    }

    #[test]
    fn checks_run_in_the_documented_order() {
        let mut p = policy(&["admin:transport=unix"]);
        p.expected_only = true;
        p.no_anonymous = true;
        let taken = |_: &str| true;
        assert_eq!(
            p.admit(&Keyword::Anonymous, UNIX, taken),
            Err(Refusal::AnonymousRefused)
        );
        assert_eq!(
            p.admit(&named("admin"), tcp("127.0.0.1"), taken),
            Err(Refusal::TransportRefused)
        );
        assert_eq!(
            p.admit(&named("admin"), UNIX, taken),
            Err(Refusal::NotExpected)
        );
        assert_eq!(p.admit(&named("svc"), UNIX, taken), Err(Refusal::NameTaken));
        assert_eq!(
            p.admit(&named("svc"), UNIX, |n: &str| n != "svc"),
            Ok(Admission::Expected("svc".into()))
        );
    }

    #[test]
    fn a_listener_only_tightens_the_policy() {
        let p = Policy::default();
        let strict = Listener {
            no_anonymous: true,
            expected_only: true,
        };
        let free = |_: &str| false;
        assert_eq!(
            p.admit_on(&Keyword::Anonymous, UNIX, strict, free),
            Err(Refusal::AnonymousRefused)
        );
        // Not expected comes before taken, whichever of the two made the listener strict.
        assert_eq!(
            p.admit_on(&named("x"), UNIX, strict, |_: &str| true),
            Err(Refusal::NotExpected)
        );
        assert_eq!(
            p.admit_on(&named("x"), UNIX, Listener::default(), free),
            Ok(Admission::Unknown("x".into()))
        );
    }

    #[test]
    fn rule_syntax() {
        let (name, rule) = parse_rule("ops:transport=tcp,udp,from=10.0.0.0/8,192.168.1.7").unwrap();
        assert_eq!(name, "ops");
        assert_eq!(rule.transports, [Transport::Tcp, Transport::Udp]);
        assert_eq!(rule.from.len(), 2);
        for bad in [
            "ops",
            "ops:",
            "ops:transport=sctp",
            "ops:from=10.0.0.0/33",
            "ops:speed=1",
            ":transport=tcp",
            "a\nb:transport=tcp",
        ] {
            assert!(parse_rule(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn name_taken_refuses_by_default_and_a_rule_may_replace() {
        let mut p = Policy::default();
        let taken = |_: &str| true;
        assert_eq!(p.admit(&named("svc"), UNIX, taken), Err(Refusal::NameTaken));
        let (name, rule) = parse_rule("svc:name-taken=replace").unwrap();
        assert_eq!(rule.name_taken, Some(NameTaken::Replace));
        p.rules.insert(name, rule);
        assert!(p.admit(&named("svc"), UNIX, taken).is_ok());
        assert_eq!(
            p.admit(&named("other"), UNIX, taken),
            Err(Refusal::NameTaken)
        );
        p.name_taken = NameTaken::Replace;
        assert!(p.admit(&named("other"), UNIX, taken).is_ok());
        assert!(parse_rule("svc:name-taken=maybe").is_err());
    }
}
