//! Who may connect as what (docs/msg-protocol.md §2): what a name may be ([`NameRule`]),
//! expected names, per-name rules on transport and source address, anonymous clients, one live
//! connection per name. The decision
//! is a pure function of the keyword, where the client came from, and which names are held, so
//! every engine (and every test) gets the same answer in the same order of checks.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;

use ipnet::IpNet;

use super::handshake::{Keyword, Refusal};
use super::name::{Name, NameRule};

/// The kind of listener a client came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// A TCP listener (plain).
    Tcp,
    /// A TCP listener speaking TLS (`tls://`).
    Tls,
    /// A UDP listener.
    Udp,
    /// A UNIX stream socket.
    Unix,
}

impl Transport {
    fn parse(s: &str) -> Option<Transport> {
        match s {
            "tcp" => Some(Transport::Tcp),
            "tls" => Some(Transport::Tls),
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
    /// The client must present a TLS certificate whose common name is this name (`cert`).
    pub cert: bool,
    /// Most bytes of a message streamed to this name from another client's message while that
    /// message is still arriving (`streams=SIZE`; issue 29). Without it (`None`) no such stream
    /// is opened to it: a sender that stops halfway would leave it inside a frame that can
    /// never end. A receiver that takes them gets a stream its sender abandons completed with
    /// zero bytes up to its announced length, so this is also the most such filler it can be
    /// sent for one message.
    pub streams: Option<u64>,
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

/// A name as written on the command line (`--expect NAME`, `msg send --name NAME`): the
/// escaped form of [`Name`] (`\\` a backslash, `\xNN` any byte, everything else as typed),
/// which must be a name under `rule`.
pub fn parse_name(s: &str, rule: NameRule) -> Result<Name, String> {
    let name = Name::unescape(s);
    // Quoted in the escaped form (as typed, for names typed escaped).
    rule.check(name.as_bytes())
        .map_err(|why| format!("{name:?} is not a valid client name: {why}"))?;
    Ok(name)
}

/// A byte count as every size on berth's command line is written: `1000`, `64k`, `1m`, `1g`
/// (k, m, g are powers of 1024; a trailing `b` or `ib` is allowed: `64MiB`), below 2^63.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let lower = s.to_ascii_lowercase();
    let t = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match t.as_bytes().last() {
        Some(b'k') => (&t[..t.len() - 1], 10),
        Some(b'm') => (&t[..t.len() - 1], 20),
        Some(b'g') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .filter(|&n| n < 1 << 63)
        .ok_or_else(|| format!("'{s}' is not a size (e.g. 64, 1k, 64k, 1m, 8760000, 64m, 1g)"))
}

/// A rule as written on the command line: `NAME:transport=unix,from=127.0.0.0/8`. `NAME` is
/// in the escaped form (a colon in it is `\x3a`); whether it obeys the server's [`NameRule`]
/// is [`Policy::check_names`]'s to say.
pub fn parse_rule(s: &str) -> Result<(Name, Rule), String> {
    let (name, spec) = s
        .split_once(':')
        .ok_or_else(|| format!("rule {s:?}: expected NAME:transport=...,from=..."))?;
    let name = parse_name(
        name,
        NameRule {
            max: usize::MAX,
            strict: false,
        },
    )
    .map_err(|e| format!("rule {s:?}: {e}"))?;
    let mut rule = Rule::default();
    // `key=v1,v2,key2=v3`: a value without `=` continues the previous key's list.
    let mut key = "";
    for item in spec.split(',').filter(|i| !i.is_empty()) {
        let value = match item.split_once('=') {
            Some((k, v)) => {
                key = k;
                v
            }
            None if item == "cert" => {
                key = "cert";
                item
            }
            None => item,
        };
        match key {
            "cert" if value == "cert" => rule.cert = true,
            "transport" => rule.transports.push(Transport::parse(value).ok_or_else(|| {
                format!("rule {s:?}: unknown transport {value:?} (tcp, tls, udp or unix)")
            })?),
            "streams" => {
                rule.streams = Some(
                    parse_size(value)
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| {
                            format!("rule {s:?}: streams is a size above zero (64k, 1g), not {value:?}")
                        })?,
                )
            }
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
                    "rule {s:?}: unknown constraint {key:?} (transport, from, name-taken, cert, streams)"
                ))
            }
        }
    }
    if rule.transports.is_empty()
        && rule.from.is_empty()
        && rule.name_taken.is_none()
        && !rule.cert
        && rule.streams.is_none()
    {
        return Err(format!("rule {s:?}: no constraint given"));
    }
    Ok((name, rule))
}

/// How a client was admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// A name given in advance with `--expect`.
    Expected(Name),
    /// Any other name.
    Unknown(Name),
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
    /// What a keyword must be to be a name: by default any bytes up to 4 KiB not starting with
    /// `#` (`--max-name`), or the strict rule of old (`--strict-names`). A keyword that is not
    /// a name is refused with `name-invalid` before any other check.
    pub names: NameRule,
    /// Names expected in advance.
    pub expected: HashSet<Name>,
    /// Rules by name.
    pub rules: HashMap<Name, Rule>,
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
        is_taken: impl Fn(&Name) -> bool,
    ) -> Result<Admission, Refusal> {
        self.admit_on(keyword, peer, Listener::default(), is_taken)
    }

    /// Whether every expected name and every rule's name is a name under [`Policy::names`]
    /// (one that is not could never connect: a mistake worth reporting at startup).
    pub fn check_names(&self) -> Result<(), String> {
        for name in self.expected.iter().chain(self.rules.keys()) {
            if let Err(why) = self.names.check(name.as_bytes()) {
                return Err(format!("{name:?} is not a valid client name here: {why}"));
            }
        }
        Ok(())
    }

    /// What a newcomer claiming `name` while it is held gets: its rule's choice, else the
    /// policy's.
    pub fn on_taken(&self, name: &[u8]) -> NameTaken {
        self.rules
            .get(name)
            .and_then(|r| r.name_taken)
            .unwrap_or(self.name_taken)
    }

    /// Most bytes a message still arriving from another client may be streamed to `name` in
    /// (its rule's `streams=`); 0 without one.
    pub fn streams_to(&self, name: &[u8]) -> u64 {
        self.rules.get(name).and_then(|r| r.streams).unwrap_or(0)
    }

    /// [`Policy::admit`] on a listener with stricter settings of its own (they add to the
    /// policy's, never relax them).
    pub fn admit_on(
        &self,
        keyword: &Keyword,
        peer: Peer,
        listener: Listener,
        is_taken: impl Fn(&Name) -> bool,
    ) -> Result<Admission, Refusal> {
        self.admit_certified(keyword, peer, listener, None, is_taken)
    }

    /// [`Policy::admit_on`] for a client that may have presented a TLS certificate: `cert` is
    /// the common name in it, checked (after the address) against a rule that asks for one.
    pub fn admit_certified(
        &self,
        keyword: &Keyword,
        peer: Peer,
        listener: Listener,
        cert: Option<&[u8]>,
        is_taken: impl Fn(&Name) -> bool,
    ) -> Result<Admission, Refusal> {
        let no_anonymous = self.no_anonymous || listener.no_anonymous;
        let expected_only = self.expected_only || listener.expected_only;
        let name = match keyword {
            Keyword::Anonymous if no_anonymous => return Err(Refusal::AnonymousRefused),
            Keyword::Anonymous => return Ok(Admission::Anonymous),
            Keyword::Named(name) => name,
        };
        if let Some(rule) = self.rules.get(name.as_bytes()) {
            if !rule.transports.is_empty() && !rule.transports.contains(&peer.transport) {
                return Err(Refusal::TransportRefused);
            }
            // UNIX peers have no address and are local: `from` does not apply to them.
            if let (false, Some(ip)) = (rule.from.is_empty(), peer.ip) {
                if !rule.from.iter().any(|net| net.contains(&ip)) {
                    return Err(Refusal::AddressRefused);
                }
            }
            if rule.cert && cert != Some(name.as_bytes()) {
                return Err(Refusal::CertRefused);
            }
        }
        let expected = self.expected.contains(name.as_bytes());
        if expected_only && !expected {
            return Err(Refusal::NotExpected);
        }
        if is_taken(name) && self.on_taken(name.as_bytes()) == NameTaken::Refuse {
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
        Keyword::Named(n.into())
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
            expected: ["svc".into()].into(),
            ..Policy::default()
        }
    }

    #[test]
    fn rules_restrict_transport_and_address() {
        let p = policy(&["admin:transport=unix", "svc:from=127.0.0.0/8,::1"]);
        let free = |_: &Name| false;
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
        let taken = |_: &Name| true;
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
            p.admit(&named("svc"), UNIX, |n: &Name| *n != "svc"),
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
        let free = |_: &Name| false;
        assert_eq!(
            p.admit_on(&Keyword::Anonymous, UNIX, strict, free),
            Err(Refusal::AnonymousRefused)
        );
        // Not expected comes before taken, whichever of the two made the listener strict.
        assert_eq!(
            p.admit_on(&named("x"), UNIX, strict, |_: &Name| true),
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
            "#1.2:transport=tcp",
        ] {
            assert!(parse_rule(bad).is_err(), "{bad}");
        }
        // Issue 15: a name is any bytes; on the command line in the escaped form.
        let (name, _) = parse_rule("a\nb:transport=tcp").unwrap();
        assert_eq!(name, "a\nb");
        let (name, _) = parse_rule("\\xff\\xfe\\x3ax:transport=tcp").unwrap();
        assert_eq!(name.as_bytes(), b"\xff\xfe:x");
    }

    #[test]
    fn names_given_in_advance_must_obey_the_name_rule() {
        let mut p = policy(&["\\xff:transport=tcp"]);
        assert_eq!(p.check_names(), Ok(()));
        p.names = NameRule::STRICT;
        assert!(p.check_names().unwrap_err().contains("strict"));
        p.rules.clear();
        assert_eq!(p.check_names(), Ok(()));
        p.expected.insert(Name::from(vec![b'n'; 300]));
        assert!(p.check_names().unwrap_err().contains("at most 255 bytes"));
        assert_eq!(
            parse_name("a\\x20b", NameRule::DEFAULT),
            Ok(Name::from("a b"))
        );
        assert!(parse_name("a\\x20b", NameRule::STRICT).is_err());
        assert!(parse_name("", NameRule::DEFAULT).is_err());
    }

    #[test]
    fn binary_names_are_admitted_and_ruled_like_any_other() {
        let mut p = policy(&["\\xff\\xfe:transport=unix"]);
        p.expected.insert(Name::from(b"a\nb"));
        let free = |_: &Name| false;
        let bin = Keyword::Named(Name::from(b"\xff\xfe"));
        assert_eq!(
            p.admit(&bin, tcp("127.0.0.1"), free),
            Err(Refusal::TransportRefused)
        );
        assert_eq!(
            p.admit(&bin, UNIX, free),
            Ok(Admission::Unknown(b"\xff\xfe".into()))
        );
        let nl = Keyword::Named(Name::from(b"a\nb"));
        assert_eq!(
            p.admit(&nl, UNIX, free),
            Ok(Admission::Expected(b"a\nb".into()))
        );
        assert_eq!(
            p.admit(&nl, UNIX, |n: &Name| *n == b"a\nb"[..]),
            Err(Refusal::NameTaken)
        );
    }

    #[test]
    fn name_taken_refuses_by_default_and_a_rule_may_replace() {
        let mut p = Policy::default();
        let taken = |_: &Name| true;
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

    /// Issue 29: streamed messages from others reach a name only when its rule says how big
    /// (`streams=SIZE`, in the command line's size syntax); it is no constraint on admission.
    #[test]
    fn streams_are_taken_only_where_a_rule_says_how_many_bytes() {
        let (name, rule) = parse_rule("bulk:streams=1g").unwrap();
        assert_eq!(rule.streams, Some(1 << 30));
        let mut p = Policy::default();
        p.rules.insert(name, rule);
        assert_eq!(p.streams_to(b"bulk"), 1 << 30);
        assert_eq!(p.streams_to(b"other"), 0);
        assert!(p.admit(&named("bulk"), UNIX, |_: &Name| false).is_ok());
        let (_, rule) = parse_rule("svc:transport=tcp,streams=64k,from=::1").unwrap();
        assert_eq!(rule.streams, Some(64 << 10));
        assert_eq!(rule.transports, [Transport::Tcp]);
        for bad in [
            "x:streams=0",
            "x:streams=lots",
            "x:streams=",
            "x:streams=9999999999g",
        ] {
            let e = parse_rule(bad).unwrap_err();
            assert!(e.contains("streams is a size above zero"), "{bad}: {e}");
        }
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert!(parse_size("1.5m").is_err());
    }
}
