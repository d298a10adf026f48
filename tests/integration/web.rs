//! The web page in a real browser: Debian's headless `chromium` driven over WebDriver
//! (`chromedriver` on loopback, the `fantoccini` client) against a real `ragbox serve` with real
//! models (the default LLM and prompt) and a copy of the sample corpus, inside the suite's
//! network namespace. In order: the served page names no other origin; the one-time start-up
//! link signs in (and works once); the admin view verifies the audit chain; an answer of quoted
//! evidence, marked in its passage, with a citation chip whose passage is the expected document; the source opened at its span;
//! thumbs up makes a feedback row; a chat session answers and is listed; 360 px wide without
//! sideways scrolling; an out-of-domain question shows the refusal, a near miss "the documents
//! do not say"; a wrong key is refused in
//! words; a writer uploads a file, watches it reach "ingested" and sees none of the other
//! tenant's documents; a reader has no upload control and the API refuses its upload anyway;
//! the server killed mid-answer: the page says the connection was lost and offers a retry.
//! Screenshots of the main states go to `<target>/web-screenshots/`.
//!
//! Needs `chromium` and `chromedriver` on the PATH (`scripts/test.sh` installs them).

use std::net::TcpListener;
use std::path::PathBuf;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};

use crate::server::{cli, create_key, get, start_with, HANDBOOK};

/// A chromedriver process on a free loopback port, in a process group of its own; the group
/// (chromedriver and the browsers it started) is killed on drop, also when a check fails.
pub(crate) struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join(name)).find(|p| p.is_file())
}

pub(crate) fn driver() -> Driver {
    let exe = which("chromedriver").expect(
        "chromedriver is not installed: the browser test needs Debian's chromium and chromium-driver \
         (scripts/test.sh installs them: apt-get install chromium chromium-driver)",
    );
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let child = Command::new(exe)
        .arg(format!("--port={port}"))
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "chromedriver did not start listening on {url}");
        std::thread::sleep(Duration::from_millis(100));
    }
    Driver { child, url }
}

pub(crate) async fn browser(driver: &Driver, profile: &std::path::Path) -> Client {
    let mut options = serde_json::json!({
        "args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-extensions", "--window-size=1280,900", format!("--user-data-dir={}", profile.display()),
        ],
    });
    if let Some(chromium) = which("chromium") {
        options["binary"] = chromium.to_string_lossy().into();
    }
    let mut caps = serde_json::Map::new();
    caps.insert("goog:chromeOptions".into(), options);
    ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
        .capabilities(caps)
        .connect(&driver.url)
        .await
        .expect("a headless chromium session through chromedriver")
}

fn shots() -> PathBuf {
    let target = std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let dir = target.join("web-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

pub(crate) async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.unwrap();
    std::fs::write(shots().join(format!("{name}.png")), png).unwrap();
}

pub(crate) async fn find(c: &Client, css: &str) -> Element {
    c.wait().at_most(Duration::from_secs(30)).for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"))
}

/// Waits up to `secs` for `js` (a function body returning a value) to return something truthy.
pub(crate) async fn until(c: &Client, secs: u64, what: &str, js: &str) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = c.execute(js, vec![]).await.unwrap();
        if !(v.is_null() || v == false || v == "" || v == 0) {
            return v;
        }
        if Instant::now() > deadline {
            let notice = c.execute("return document.body.innerText", vec![]).await.unwrap();
            panic!("waited {secs} s for {what}; the page says:\n{}", notice.as_str().unwrap_or(""));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) async fn text(c: &Client, css: &str) -> String {
    find(c, css).await.text().await.unwrap()
}

async fn displayed(c: &Client, css: &str) -> bool {
    match c.find(Locator::Css(css)).await {
        Ok(e) => e.is_displayed().await.unwrap(),
        Err(_) => false,
    }
}

async fn sign_in_with(c: &Client, base: &str, key: &str) {
    c.goto(&format!("{base}/")).await.unwrap();
    // The form is in the page from the start but hidden until the page has asked the server
    // whether a session exists; typing before then is typing into a hidden field.
    until(c, 15, "the sign-in form", "return !document.querySelector('#signin-view').hidden").await;
    let input = find(c, "#key").await;
    input.send_keys(key).await.unwrap();
    find(c, "#signin-form button[type=submit]").await.click().await.unwrap();
}

async fn sign_out(c: &Client) {
    find(c, "#sign-out").await.click().await.unwrap();
    until(c, 10, "the sign-in form", "return !document.querySelector('#signin-view').hidden").await;
}

async fn tab(c: &Client, view: &str) {
    find(c, &format!("#tabs button[data-view={view}]")).await.click().await.unwrap();
}

/// The status of `fetch(method, path)` made by the page itself (its cookie, its origin).
async fn page_fetch(c: &Client, method: &str, path: &str, form: bool) -> u16 {
    let js = r#"
        const [method, path, form, done] = arguments;
        let body;
        if (form) { body = new FormData(); body.append('file', new Blob(['# Note\n\nhello\n']), 'note.md'); }
        fetch(path, { method, body }).then(r => done(r.status), () => done(0));
    "#;
    let v = c.execute_async(js, vec![method.into(), path.into(), form.into()]).await.unwrap();
    v.as_u64().unwrap() as u16
}

const QUESTION: &str = "How many days after a trip do I have to submit my expense claim?";
/// A near miss of the sample corpus: the documents never give it ([`crate::answer::NEAR_MISSES`]).
const NEAR_MISS: &str = crate::answer::NEAR_MISSES[0];

#[test]
fn web_page_in_a_real_browser() {
    // The default model and prompt layout (what a person gets), answers kept short.
    let mut server = start_with("[generate]\nmax_tokens = 96\n[server]\nmax_upload_bytes = 200000\n");
    let b = server.base.clone();
    let reader = create_key(&server, &["--tenant", "default", "--role", "reader", "--name", "web-reader"]);
    let writer = create_key(&server, &["--tenant", "webco", "--role", "writer", "--name", "web-writer"]);

    // The page and its assets name no other origin (everything is embedded in the binary).
    let page = ureq::get(&format!("{b}/")).call().unwrap();
    assert!(page.header("Content-Security-Policy").is_some_and(|p| p.contains("default-src 'self'")));
    let html = page.into_string().unwrap();
    assert!(html.contains("/assets/app.js") && html.contains("/assets/app.css"), "{html}");
    for asset in ["app.js", "api.js", "app.css"] {
        let body = ureq::get(&format!("{b}/assets/{asset}")).call().unwrap().into_string().unwrap();
        assert!(!body.contains("http://") && !body.contains("https://"), "{asset} names another origin");
    }
    assert!(!html.contains("http://") && !html.contains("https://"), "index.html names another origin");

    let driver = driver();
    let profile = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let c = browser(&driver, profile.path()).await;

        // The start-up link signs in as the local user, and takes the token out of the address.
        c.goto(&server.signin).await.unwrap();
        until(&c, 15, "signed in", "return !document.querySelector('#who').hidden").await;
        assert_eq!(c.current_url().await.unwrap().path(), "/");
        assert!(text(&c, "#who-name").await.contains("local sign-in link"));
        // Everything the page loaded came from the server itself.
        let origins = c
            .execute("return performance.getEntriesByType('resource').map(e => new URL(e.name).origin).filter(o => o !== location.origin)", vec![])
            .await
            .unwrap();
        assert_eq!(origins, serde_json::json!([]), "the page loaded something from another origin");

        // Admin: the audit log and its chain, doctor's view.
        tab(&c, "admin").await;
        until(&c, 30, "audit rows", "return document.querySelectorAll('#audit-table tbody tr').length > 1").await;
        find(&c, "#audit-verify").await.click().await.unwrap();
        let verdict = until(&c, 30, "the chain's verdict", "const t = document.querySelector('#verify-result').textContent; return t.includes('intact') || t.includes('BROKEN') ? t : ''").await;
        assert!(verdict.as_str().unwrap().contains("The chain is intact"), "{verdict}");
        until(&c, 30, "doctor's tenants", "return document.querySelector('#doctor').textContent.includes('consistent')").await;
        shot(&c, "admin").await;

        // Ask: the answer streams in, then carries chips; a chip's passage is the expected document.
        tab(&c, "ask").await;
        find(&c, "#question").await.send_keys(QUESTION).await.unwrap();
        find(&c, "#ask-button").await.click().await.unwrap();
        until(&c, 300, "the answer", "return !!document.querySelector('#answer .answer, #answer .error-box')").await;
        assert!(!displayed(&c, "#answer .error-box").await, "{}", text(&c, "#answer").await);
        // Evidence first: the answer is the deciding sentence as the documents write it, sent
        // whole once chosen (so it may stream in one piece, or show at once), and the page says
        // it is a quote; the sentence is marked in its source card.
        assert!(text(&c, "#answer .quote-note").await.starts_with("The evidence, quoted as the documents write it."));
        let marked = c
            .execute(
                "const a = document.querySelector('#answer .answer-text').textContent.replace(/\\s*\\[\\d+\\]/g, '').replace(/\\s+/g, ' '); \
                 return [...document.querySelectorAll('#sources .excerpt mark')].some((m) => { const t = m.textContent.replace(/\\s+/g, ' ').replace(/[.:;!?]+$/, ''); return t.length > 10 && a.includes(t); });",
                vec![],
            )
            .await
            .unwrap();
        assert_eq!(marked, serde_json::json!(true), "the quoted evidence is marked in its passage");
        let chip = find(&c, "#answer .chip").await;
        let n = chip.attr("data-source").await.unwrap().unwrap();
        let card = format!("#sources .source-card[data-source=\"{n}\"]");
        assert!(text(&c, &format!("{card} .meta")).await.contains("travel-and-expenses.md"), "chip [{n}] points at the travel policy");
        // Focusing (or hovering) a chip highlights its passage in the sidebar.
        c.execute("document.querySelector('#answer .chip').focus()", vec![]).await.unwrap();
        let class = find(&c, &card).await.attr("class").await.unwrap().unwrap_or_default();
        assert!(class.contains("active"), "the cited passage is highlighted: {class}");
        assert!(text(&c, "#answer .timings").await.contains("first token"));
        shot(&c, "answer").await;

        // The source opens at its span.
        find(&c, &format!("{card} .open-doc")).await.click().await.unwrap();
        let cited = until(&c, 30, "the document at its span", "const m = document.querySelector('#doc-dialog[open] mark.cited'); return m ? m.textContent : ''").await;
        let cited = cited.as_str().unwrap().to_string();
        assert!(cited.contains("30") || cited.to_lowercase().contains("claim"), "the marked span is the cited passage: {cited:?}");
        let visible = c
            .execute("const m = document.querySelector('mark.cited').getBoundingClientRect(); const p = document.querySelector('#doc-text').getBoundingClientRect(); return m.top >= p.top && m.top < p.bottom", vec![])
            .await
            .unwrap();
        assert_eq!(visible, true, "the view is scrolled to the span");
        shot(&c, "source").await;
        find(&c, "#doc-close").await.click().await.unwrap();

        // Thumbs up: a feedback row exists for this answer.
        find(&c, "#answer .feedback-comment").await.send_keys("clear and cited").await.unwrap();
        find(&c, "#answer .feedback-up").await.click().await.unwrap();
        until(&c, 15, "the rating recorded", "return document.querySelector('#answer .feedback-status').textContent.includes('recorded')").await;
        let conn = rusqlite::Connection::open(server.data.join("catalog.sqlite")).unwrap();
        let (rating, comment): (String, String) = conn
            .query_row("SELECT rating, comment FROM feedback ORDER BY id DESC LIMIT 1", [], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        assert_eq!((rating.as_str(), comment.as_str()), ("up", "clear and cited"));

        // Chat: a new session answers and is listed.
        tab(&c, "chat").await;
        find(&c, "#new-chat").await.click().await.unwrap();
        find(&c, "#chat-question").await.send_keys(QUESTION).await.unwrap();
        find(&c, "#chat-send").await.click().await.unwrap();
        until(&c, 300, "the chat answer", "return !!document.querySelector('#turns .answer, #turns .error-box')").await;
        assert!(!displayed(&c, "#turns .error-box").await, "{}", text(&c, "#turns").await);
        until(&c, 15, "the session listed", "return document.querySelectorAll('#sessions .session').length").await;
        tab(&c, "ask").await;

        // "Export my conversations": the signed-in person's questions, answers and feedback as
        // JSON lines, fetched as the link downloads them.
        assert!(displayed(&c, "#export-mine").await);
        let href = find(&c, "#export-mine").await.attr("href").await.unwrap().unwrap_or_default();
        assert_eq!(href, "/v1/tenants/default/export");
        let exported = c
            .execute_async("const [path, done] = arguments; fetch(path).then((r) => r.text()).then(done, () => done(''));", vec![href.into()])
            .await
            .unwrap();
        let exported = exported.as_str().unwrap_or_default();
        assert!(exported.lines().any(|l| l.contains("\"type\":\"answer\"") && l.contains(QUESTION) && l.contains("clear and cited")), "{exported}");
        assert!(exported.lines().any(|l| l.contains("\"type\":\"session\"")), "{exported}");

        // Readable at 360 px: nothing scrolls sideways.
        c.set_window_size(360, 800).await.unwrap();
        let overflow = c.execute("return document.documentElement.scrollWidth - window.innerWidth", vec![]).await.unwrap();
        assert!(overflow.as_i64().unwrap() <= 0, "the page is wider than 360 px by {overflow} px");
        shot(&c, "answer-360").await;
        c.set_window_size(1280, 900).await.unwrap();

        // An out-of-domain question is refused, its closest material labelled "not a source".
        let q = find(&c, "#question").await;
        q.clear().await.unwrap();
        q.send_keys("Who won the football World Cup in 2018?").await.unwrap();
        find(&c, "#ask-button").await.click().await.unwrap();
        until(&c, 300, "the refusal", "return !!document.querySelector('#answer .refusal')").await;
        assert!(text(&c, "#answer .refusal").await.contains("No good source"));
        if displayed(&c, "#sources .source-card").await {
            assert!(text(&c, "#sources .source-card .badge").await.contains("not a source"));
        }
        shot(&c, "refusal").await;

        // A near miss (tests/integration/answer.rs): the documents are about it but do not say;
        // the page tells that apart from "No good source" and lists the closest passages.
        let q = find(&c, "#question").await;
        q.clear().await.unwrap();
        q.send_keys(NEAR_MISS).await.unwrap();
        find(&c, "#ask-button").await.click().await.unwrap();
        until(&c, 300, "the documents do not say", "return !!document.querySelector('#answer .refusal.does-not-say')").await;
        assert!(text(&c, "#answer .refusal").await.contains("The documents do not say"));
        assert!(!text(&c, "#answer .refusal").await.contains("No good source"));
        assert!(displayed(&c, "#sources .source-card").await, "the closest passages are listed");
        shot(&c, "does-not-say").await;

        // A wrong key is refused in words.
        sign_out(&c).await;
        sign_in_with(&c, &b, "rbx_not_a_real_key").await;
        until(&c, 10, "the sign-in error", "return document.querySelector('#signin-error').textContent").await;
        assert!(text(&c, "#signin-error").await.contains("not valid"));

        // A writer uploads a file and watches it reach "ingested"; it sees only its own tenant.
        let upload_dir = tempfile::tempdir().unwrap();
        let file = upload_dir.path().join("webco-handbook.md");
        std::fs::write(&file, HANDBOOK).unwrap();
        sign_in_with(&c, &b, &writer).await;
        until(&c, 15, "signed in", "return !document.querySelector('#who').hidden").await;
        tab(&c, "documents").await;
        assert!(displayed(&c, "#upload-zone").await, "a writer has the upload control");
        find(&c, "#file-input").await.send_keys(&file.to_string_lossy()).await.unwrap();
        let state = until(&c, 180, "the upload ingested", "const s = document.querySelector('.upload-row .upload-state'); return s && /ingested|failed|skipped/.test(s.textContent) ? s.textContent : ''").await;
        assert_eq!(state, "ingested");
        until(&c, 15, "the document listed", "return document.querySelector('#documents-table tbody').textContent.includes('webco-handbook.md')").await;
        let listed = text(&c, "#documents-table tbody").await;
        assert!(!listed.contains("travel-and-expenses"), "the writer's tenant shows none of the default tenant's documents");
        let tenants = c.execute("return [...document.querySelectorAll('#tenant option')].map(o => o.value)", vec![]).await.unwrap();
        assert_eq!(tenants, serde_json::json!(["webco"]));
        assert_eq!(page_fetch(&c, "GET", "/v1/tenants/default/documents", false).await, 404, "another tenant reads as absent");
        shot(&c, "documents").await;

        // A reader sees no write controls, and the API refuses its upload anyway.
        sign_out(&c).await;
        sign_in_with(&c, &b, &reader).await;
        until(&c, 15, "signed in", "return !document.querySelector('#who').hidden").await;
        tab(&c, "documents").await;
        until(&c, 15, "the documents", "return document.querySelector('#documents-table tbody').textContent.includes('travel-and-expenses')").await;
        assert!(!displayed(&c, "#upload-zone").await, "a reader has no upload control");
        assert!(displayed(&c, "#read-only-note").await);
        assert_eq!(c.find_all(Locator::Css("#documents-table button")).await.unwrap().len(), 0, "no remove or re-ingest");
        assert!(!displayed(&c, "#tabs button[data-view=admin]").await);
        assert_eq!(page_fetch(&c, "POST", "/v1/tenants/default/documents", true).await, 403, "the API refuses a reader's upload");

        // A used start-up link does not sign in again.
        let again = ureq::builder().redirects(0).build().get(&server.signin).call().unwrap();
        assert_eq!(again.status(), 303);
        assert_eq!(again.header("Location"), Some("/?signin=used"));
        assert!(again.header("Set-Cookie").is_none());
        // A cookie-less, key-less request stays refused, and the audit chain still verifies.
        assert_eq!(get(&format!("{b}/web/session"), None).0, 401);
        let (code, out, err) = cli(&server, &["audit", "verify"]);
        assert_eq!(code, 0, "{out}\n{err}");

        // The server dies while an answer streams: the page says the connection was lost and
        // offers a retry.
        tab(&c, "ask").await;
        let q = find(&c, "#question").await;
        q.clear().await.unwrap();
        q.send_keys(QUESTION).await.unwrap();
        find(&c, "#ask-button").await.click().await.unwrap();
        // The stream is open (the server accepted the question) and the model is still reading.
        until(&c, 60, "the stream open", "const s = document.querySelector('#answer .status'); return s && s.textContent.includes('Reading the passages')").await;
        server.kill();
        until(&c, 30, "the lost connection", "return !!document.querySelector('#answer .error-box')").await;
        assert!(text(&c, "#answer .error-box").await.contains("connection to the server was lost"));
        assert!(displayed(&c, "#answer .error-box button.retry").await);
        shot(&c, "lost-connection").await;

        c.close().await.unwrap();
    });
}
