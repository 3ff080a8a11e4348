//! The file answers' tests: validators, ranges, codings, refusals, written as HTTP/1.1 text.
use super::*;
use crate::http::response::Text;
use crate::http::Version;

fn request(headers: &[(&'static str, &'static str)], method: Method) -> FileRequest {
    let hs: Vec<httparse::Header<'static>> = headers
        .iter()
        .map(|&(name, value)| httparse::Header {
            name,
            value: value.as_bytes(),
        })
        .collect();
    let req = Request {
        method,
        target: "/files/f",
        path: "/files/f",
        query: None,
        version: Version::Http11,
        headers: &hs,
        body: b"",
        peer: None,
    };
    FileRequest::parse(&req, "f").unwrap()
}

fn get(headers: &[(&'static str, &'static str)]) -> FileRequest {
    request(headers, Method::Get)
}

fn meta(len: u64) -> FileMeta {
    FileMeta::plain(
        len,
        UNIX_EPOCH + Duration::new(784_111_777, 5),
        "text/plain; charset=utf-8",
    )
}

/// Runs `write_answer` and returns (status, range to send, response text).
fn answer(
    req: &FileRequest,
    found: Result<&FileMeta, FileError>,
) -> (u16, Option<(u64, u64)>, String) {
    let mut out = Vec::new();
    let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
    let stamp = Stamp::both(date);
    let (status, send, _) = write_answer(
        &mut out,
        &mut Text(Version::Http11),
        req,
        found,
        true,
        stamp,
    );
    assert!(send.is_none_or(|s| s.encode.is_none()), "{send:?}");
    (
        status,
        send.map(|s| (s.offset, s.len)),
        String::from_utf8(out).unwrap(),
    )
}

/// Runs `write_answer` and returns (status, what to send, response text).
fn answer_coded(req: &FileRequest, found: &FileMeta) -> (u16, Option<Send>, String) {
    let mut out = Vec::new();
    let date = b"Sun, 06 Nov 1994 08:49:37 GMT";
    let stamp = Stamp::both(date);
    let (status, send, _) = write_answer(
        &mut out,
        &mut Text(Version::Http11),
        req,
        Ok(found),
        true,
        stamp,
    );
    (status, send, String::from_utf8(out).unwrap())
}

#[test]
fn a_precompressed_sibling_has_its_own_tag_and_ranges_over_its_bytes() {
    let plain = FileMeta {
        vary: true,
        ..meta(1000)
    };
    let gz = FileMeta {
        encoding: Some(Coding::Gzip),
        vary: true,
        ..meta(100)
    };
    assert_ne!(
        etag(&plain),
        etag(&FileMeta {
            vary: false,
            ..meta(100)
        })
        .replace("-gzip", "")
    );
    assert!(etag(&gz).ends_with("-gzip\""), "{}", etag(&gz));
    let (status, send, text) = answer_coded(&get(&[("Accept-Encoding", "gzip")]), &gz);
    assert_eq!(
        (status, send.map(|s| (s.offset, s.len, s.encode))),
        (200, Some((0, 100, None)))
    );
    assert!(text.contains("\r\nContent-Encoding: gzip\r\n"), "{text}");
    assert!(text.contains("\r\nVary: Accept-Encoding\r\n"), "{text}");
    assert!(text.contains("\r\nContent-Length: 100\r\n"), "{text}");
    assert!(
        text.contains(&format!("\r\nETag: {}\r\n", etag(&gz))),
        "{text}"
    );
    // The plain answer varies too.
    let (_, _, text) = answer_coded(&get(&[]), &plain);
    assert!(text.contains("\r\nVary: Accept-Encoding\r\n"), "{text}");
    assert!(!text.contains("Content-Encoding"), "{text}");
    // A range is of the encoded bytes.
    let (status, send, text) = answer_coded(
        &get(&[("Accept-Encoding", "gzip"), ("Range", "bytes=10-19")]),
        &gz,
    );
    assert_eq!(
        (status, send.map(|s| (s.offset, s.len))),
        (206, Some((10, 10)))
    );
    assert!(
        text.contains("\r\nContent-Range: bytes 10-19/100\r\n"),
        "{text}"
    );
    // 304 by the sibling's tag, not by the plain file's.
    let tag: &'static str = Box::leak(etag(&gz).into_boxed_str());
    let (status, _, text) = answer_coded(&get(&[("If-None-Match", tag)]), &gz);
    assert_eq!(status, 304);
    assert!(text.contains("\r\nVary: Accept-Encoding\r\n"), "{text}");
    let plain_tag: &'static str = Box::leak(etag(&plain).into_boxed_str());
    assert_eq!(
        answer_coded(&get(&[("If-None-Match", plain_tag)]), &gz).0,
        200
    );
}

#[test]
fn on_the_fly_only_for_whole_compressible_answers() {
    let on = Some(Compress {
        level: 3,
        min_size: 50,
    });
    let m = meta(100);
    let gz = |h: &[(&'static str, &'static str)]| {
        let mut all = vec![("Accept-Encoding", "gzip, br;q=0.5")];
        all.extend_from_slice(h);
        get(&all).compress(on)
    };
    let (status, send, text) = answer_coded(&gz(&[]), &m);
    let encode = Encode {
        coding: Coding::Gzip,
        level: 3,
        chunked: true,
    };
    assert_eq!(
        (status, send),
        (
            200,
            Some(Send {
                offset: 0,
                len: 100,
                encode: Some(encode)
            })
        )
    );
    assert!(
        text.contains("\r\nTransfer-Encoding: chunked\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nContent-Encoding: gzip\r\n"), "{text}");
    assert!(text.contains("\r\nVary: Accept-Encoding\r\n"), "{text}");
    assert!(
        text.contains(&format!("\r\nETag: W/{}\r\n", etag(&m))),
        "{text}"
    );
    assert!(!text.contains("Content-Length"), "{text}");
    assert!(!text.contains("Accept-Ranges"), "{text}");
    // HEAD: the same head, nothing to send.
    let head = request(&[("Accept-Encoding", "gzip")], Method::Head).compress(on);
    let (status, send, text) = answer_coded(&head, &m);
    assert_eq!((status, send), (200, None));
    assert!(text.contains("\r\nContent-Encoding: gzip\r\n"), "{text}");
    // Never: a range, a 304, no-transform, too small, not compressible, off, not accepted.
    let (status, send, text) = answer_coded(&gz(&[("Range", "bytes=0-9")]), &m);
    assert_eq!((status, send.map(|s| s.encode)), (206, Some(None)));
    assert!(!text.contains("Content-Encoding"), "{text}");
    assert!(text.contains("\r\nVary: Accept-Encoding\r\n"), "{text}");
    assert_eq!(answer_coded(&gz(&[("If-None-Match", "*")]), &m).0, 304);
    for (req, m) in [
        (
            gz(&[("Cache-Control", "no-cache, no-transform")]),
            meta(100),
        ),
        (gz(&[]), meta(49)),
        (
            gz(&[]),
            FileMeta {
                content_type: "image/png",
                ..meta(100)
            },
        ),
        (get(&[("Accept-Encoding", "gzip")]), meta(100)),
        (
            get(&[("Accept-Encoding", "gzip;q=0")]).compress(on),
            meta(100),
        ),
    ] {
        let (status, send, text) = answer_coded(&req, &m);
        assert_eq!(
            (status, send.map(|s| s.encode)),
            (200, Some(None)),
            "{text}"
        );
        assert!(!text.contains("Content-Encoding"), "{text}");
    }
    // identity refused and nothing else at hand: 406.
    let refused = get(&[("Accept-Encoding", "identity;q=0")]);
    assert_eq!(answer_coded(&refused, &m).0, 406);
    let refused = get(&[("Accept-Encoding", "gzip, identity;q=0")]).compress(on);
    assert_eq!(answer_coded(&refused, &m).0, 200);
}

#[test]
fn paths_are_decoded_and_normalised() {
    let ok = |rel| sanitize(rel, 0).unwrap();
    assert_eq!(ok("a/b.txt"), ("a/b.txt".into(), false));
    assert_eq!(ok("a%20b/c%2Etxt"), ("a b/c.txt".into(), false));
    assert_eq!(ok(""), ("".into(), true));
    assert_eq!(ok("dir/"), ("dir".into(), true));
    assert_eq!(ok("a.txt/."), ("a.txt".into(), true));
    assert_eq!(ok("a.txt/%2E"), ("a.txt".into(), true));
    assert_eq!(ok("a.txt/./"), ("a.txt".into(), true));
    assert_eq!(ok("./a//b/./c"), ("a/b/c".into(), false));
    assert_eq!(ok("%C3%A9t%C3%A9.txt"), ("été.txt".into(), false));
    assert_eq!(ok("..a/b.."), ("..a/b..".into(), false));
}

#[test]
fn directory_form_and_redirect_location() {
    let parse = |path: &'static str, query: Option<&'static str>, rel: &str| {
        let req = Request {
            method: Method::Get,
            target: path,
            path,
            query,
            version: Version::Http11,
            headers: &[],
            body: b"",
            peer: None,
        };
        FileRequest::parse(&req, rel).unwrap()
    };
    let f = parse("/files/sub", Some("a=1"), "sub");
    assert_eq!(
        (f.path(), f.dir_form(), f.location()),
        ("sub", false, "/files/sub/?a=1")
    );
    let f = parse("/files/sub/", None, "sub/");
    assert_eq!((f.path(), f.dir_form()), ("sub", true));
    let f = parse("/files/a.txt/.", None, "a.txt/.");
    assert_eq!((f.path(), f.dir_form()), ("a.txt", true));
    // The route's own directory: `/files` and `/files/` both give an empty `rel`.
    let f = parse("/files", None, "");
    assert_eq!(
        (f.path(), f.dir_form(), f.location()),
        ("", false, "/files/")
    );
    assert!(parse("/files/", None, "").dir_form());
    let (status, send, text) = answer(&f, Err(FileError::Directory));
    assert_eq!((status, send), (301, None));
    assert!(
        text.starts_with("HTTP/1.1 301 Moved Permanently\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nLocation: /files/\r\n"), "{text}");
}

#[test]
fn paths_that_could_escape_are_refused() {
    for bad in [
        "..",
        "../etc/passwd",
        "a/../../etc/passwd",
        "a/..",
        "%2e%2e/etc/passwd",
        "%2E%2E",
        ".%2e/x",
        "a%2f..%2f..%2fetc",
        "..%2F..%2Fetc%2Fpasswd",
        "a%5c..%5cb",
        "/etc/passwd",
        "//etc/passwd",
        "%2fetc/passwd",
        "a%00.txt",
        "a\0b",
        "bad%zz",
        "short%2",
        "%ff%fe",
    ] {
        assert!(sanitize(bad, 0).is_err(), "{bad:?} was accepted");
    }
}

#[test]
fn content_types_by_extension() {
    assert_eq!(content_type("index.html"), "text/html; charset=utf-8");
    assert_eq!(content_type("a/b/STYLE.CSS"), "text/css; charset=utf-8");
    assert_eq!(content_type("x.png"), "image/png");
    assert_eq!(content_type("x.tar.gz"), "application/gzip");
    assert_eq!(content_type("README"), "application/octet-stream");
    assert_eq!(content_type("dir.d/file"), "application/octet-stream");
    assert_eq!(
        content_type("x.verylongextension"),
        "application/octet-stream"
    );
}

#[test]
fn ranges_parse_and_resolve() {
    let part = |h: &'static str, len| decide(&get(&[("Range", h)]), &meta(len), "\"t\"");
    assert_eq!(
        part("bytes=0-9", 100),
        Decision::Partial { start: 0, len: 10 }
    );
    assert_eq!(
        part("bytes=90-200", 100),
        Decision::Partial { start: 90, len: 10 }
    );
    assert_eq!(
        part("bytes=95-", 100),
        Decision::Partial { start: 95, len: 5 }
    );
    assert_eq!(
        part("bytes=-10", 100),
        Decision::Partial { start: 90, len: 10 }
    );
    assert_eq!(
        part("bytes=-1000", 100),
        Decision::Partial { start: 0, len: 100 }
    );
    assert_eq!(
        part("BYTES = 5-5", 100),
        Decision::Full,
        "space before = is not allowed"
    );
    assert_eq!(
        part("Bytes=5-5", 100),
        Decision::Partial { start: 5, len: 1 }
    );
    assert_eq!(part("bytes=100-", 100), Decision::Unsatisfiable);
    assert_eq!(part("bytes=100-200", 100), Decision::Unsatisfiable);
    assert_eq!(part("bytes=-0", 100), Decision::Unsatisfiable);
    assert_eq!(part("bytes=-5", 0), Decision::Unsatisfiable);
    assert_eq!(part("bytes=0-", 0), Decision::Unsatisfiable);
    // Numbers too big for 64 bits: a last-pos or suffix past the end means the end, a
    // first-pos past it is unsatisfiable; leading zeros are only zeros.
    assert_eq!(
        part("bytes=5-99999999999999999999999", 100),
        Decision::Partial { start: 5, len: 95 }
    );
    assert_eq!(
        part("bytes=-99999999999999999999999", 100),
        Decision::Partial { start: 0, len: 100 }
    );
    assert_eq!(
        part(
            "bytes=00000000000000000000000005-0000000000000000000000006",
            100
        ),
        Decision::Partial { start: 5, len: 2 }
    );
    assert_eq!(
        part("bytes=99999999999999999999999-", 100),
        Decision::Unsatisfiable
    );
    assert_eq!(
        part("bytes=99999999999999999999998-99999999999999999999999", 100),
        Decision::Unsatisfiable
    );
    // Ignored, so the whole file is sent: several ranges, bad syntax, other units, last
    // before first (however big both are).
    for ignored in [
        "bytes=0-1,5-6",
        "bytes=5-1",
        "bytes=a-b",
        "bytes=-",
        "bytes=1",
        "items=0-1",
        "bytes=99999999999999999999999-99999999999999999999998",
        "bytes=000010-9",
    ] {
        assert_eq!(part(ignored, 100), Decision::Full, "{ignored}");
    }
    // HEAD ignores Range.
    let head = request(&[("Range", "bytes=0-1")], Method::Head);
    assert_eq!(decide(&head, &meta(100), "\"t\""), Decision::Full);
}

#[test]
fn conditional_requests() {
    let m = meta(10);
    let tag = etag(&m);
    let lm = httpdate::fmt_http_date(m.modified);
    let d = |req: FileRequest| decide(&req, &m, &tag);
    let tag_s: &'static str = Box::leak(tag.clone().into_boxed_str());
    let lm_s: &'static str = Box::leak(lm.into_boxed_str());
    assert_eq!(d(get(&[("If-None-Match", tag_s)])), Decision::NotModified);
    assert_eq!(
        d(get(&[("If-None-Match", "\"x\", W/\"nope\"")])),
        Decision::Full
    );
    let weak: &'static str = Box::leak(format!("\"x\", W/{tag}").into_boxed_str());
    assert_eq!(d(get(&[("If-None-Match", weak)])), Decision::NotModified);
    assert_eq!(d(get(&[("If-None-Match", "*")])), Decision::NotModified);
    assert_eq!(
        d(get(&[("If-Modified-Since", lm_s)])),
        Decision::NotModified
    );
    assert_eq!(
        d(get(&[(
            "If-Modified-Since",
            "Sun, 06 Nov 1994 08:49:37 GMT"
        )])),
        Decision::NotModified
    );
    assert_eq!(
        d(get(&[(
            "If-Modified-Since",
            "Sat, 01 Jan 1994 00:00:00 GMT"
        )])),
        Decision::Full
    );
    assert_eq!(
        d(get(&[("If-Modified-Since", "yesterday")])),
        Decision::Full
    );
    // If-None-Match wins over If-Modified-Since.
    assert_eq!(
        d(get(&[
            ("If-None-Match", "\"other\""),
            ("If-Modified-Since", lm_s)
        ])),
        Decision::Full
    );
    // If-Range: the range only while the validator still matches.
    assert_eq!(
        d(get(&[("Range", "bytes=0-0"), ("If-Range", tag_s)])),
        Decision::Partial { start: 0, len: 1 }
    );
    assert_eq!(
        d(get(&[("Range", "bytes=0-0"), ("If-Range", "\"old\"")])),
        Decision::Full
    );
    assert_eq!(
        d(get(&[("Range", "bytes=0-0"), ("If-Range", lm_s)])),
        Decision::Partial { start: 0, len: 1 }
    );
}

#[test]
fn answers_carry_validators_lengths_and_ranges() {
    let m = meta(100);
    let (status, send, text) = answer(&get(&[]), Ok(&m));
    assert_eq!((status, send), (200, Some((0, 100))));
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    assert!(text.contains("\r\nContent-Length: 100\r\n"), "{text}");
    assert!(
        text.contains("\r\nContent-Type: text/plain; charset=utf-8\r\n"),
        "{text}"
    );
    assert!(
        text.contains("\r\nLast-Modified: Sun, 06 Nov 1994 08:49:37 GMT\r\n"),
        "{text}"
    );
    assert!(
        text.contains(&format!("\r\nETag: {}\r\n", etag(&m))),
        "{text}"
    );
    assert!(text.contains("\r\nAccept-Ranges: bytes\r\n"), "{text}");
    assert!(text.ends_with("\r\n\r\n"), "no body in the head: {text}");

    let (status, send, text) = answer(&get(&[("Range", "bytes=10-19")]), Ok(&m));
    assert_eq!((status, send), (206, Some((10, 10))));
    assert!(
        text.contains("\r\nContent-Range: bytes 10-19/100\r\n"),
        "{text}"
    );
    assert!(text.contains("\r\nContent-Length: 10\r\n"), "{text}");

    let (status, send, text) = answer(&get(&[("Range", "bytes=100-")]), Ok(&m));
    assert_eq!((status, send), (416, None));
    assert!(
        text.contains("\r\nContent-Range: bytes */100\r\n"),
        "{text}"
    );

    let (status, send, text) = answer(&get(&[("If-None-Match", "*")]), Ok(&m));
    assert_eq!((status, send), (304, None));
    assert!(!text.contains("Content-Length"), "{text}");
    assert!(text.contains("\r\nETag: "), "{text}");

    let head = request(&[], Method::Head);
    let (status, send, text) = answer(&head, Ok(&m));
    assert_eq!((status, send), (200, None));
    assert!(text.contains("\r\nContent-Length: 100\r\n"), "{text}");

    let (status, send, _) = answer(&get(&[]), Ok(&meta(0)));
    assert_eq!(
        (status, send),
        (200, None),
        "an empty file has nothing to send"
    );

    for (e, want) in [
        (FileError::NotFound, 404),
        (FileError::Forbidden, 403),
        (FileError::Failed, 500),
        (FileError::Busy, 503),
    ] {
        let (status, send, text) = answer(&get(&[]), Err(e));
        assert_eq!((status, send), (want, None));
        assert!(text.contains("Content-Length: "), "{text}");
    }
}

/// A handler that answers every request with the file it names below `/`.
struct Serve;

#[derive(Debug, PartialEq, Eq)]
struct NoJob;

impl crate::http::Job for NoJob {
    fn run(self) -> crate::http::Reply {
        crate::http::Reply::empty(500)
    }
}

impl crate::http::Handler for Serve {
    type Job = NoJob;
    fn handle(
        &mut self,
        req: &Request<'_>,
        res: &mut crate::http::Response<'_>,
    ) -> crate::http::Handled<NoJob> {
        match FileRequest::parse(req, &req.path[1..]) {
            Ok(f) => crate::http::Handled::File(f),
            Err(_) => {
                res.send(404, "text/plain", b"no\n");
                crate::http::Handled::Done
            }
        }
    }
}

#[test]
fn session_hands_files_to_the_driver_in_order() {
    use crate::http::{Action, Context, Limits, Session};
    let limits = Limits::default();
    let cx = Context {
        limits: &limits,
        date: b"Sun, 06 Nov 1994 08:49:37 GMT",
        stream_bodies: false,
        now: std::time::Instant::now(),
        alt_svc: None,
    };
    let mut session = Session::new();
    let mut input = b"GET /a.txt HTTP/1.1\r\nHost: x\r\n\r\n\
                      HEAD /a.txt HTTP/1.1\r\nHost: x\r\n\r\n\
                      GET /b HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        .to_vec();
    let mut output = Vec::new();
    let m = meta(100);

    let Action::Open { request: req, .. } =
        session.process(&mut input, &mut output, &cx, &mut Serve)
    else {
        panic!("no Open step")
    };
    assert_eq!(req.path(), "a.txt");
    assert!(output.is_empty(), "nothing is answered before the file");
    let step = session.file(&req, Ok(&m), &mut input, &mut output, &cx, &mut Serve);
    assert_eq!(
        step,
        Action::Body {
            stream: 0,
            offset: 0,
            len: 100,
            encode: None,
        }
    );
    assert!(String::from_utf8_lossy(&output).ends_with("\r\n\r\n"));
    output.clear();

    // The body goes out; then the HEAD request: a head and no bytes to send.
    let Action::Open { request: req, .. } =
        session.process(&mut input, &mut output, &cx, &mut Serve)
    else {
        panic!("no Open step for HEAD")
    };
    assert!(req.head_only());
    let step = session.file(&req, Ok(&m), &mut input, &mut output, &cx, &mut Serve);
    // Without bytes to send the session goes straight on to the third request.
    let Action::Open { request: req, .. } = step else {
        panic!("HEAD answer did not go on: {step:?}")
    };
    assert!(String::from_utf8_lossy(&output).contains("Content-Length: 100"));
    output.clear();
    let step = session.file(
        &req,
        Err(FileError::NotFound),
        &mut input,
        &mut output,
        &cx,
        &mut Serve,
    );
    assert_eq!(step, Action::Close);
    let text = String::from_utf8(output).unwrap();
    assert!(text.starts_with("HTTP/1.1 404 "), "{text}");
    assert!(text.contains("Connection: close"), "{text}");
    assert!(session.is_closed());
}
