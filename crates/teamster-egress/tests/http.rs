//! The guarded HTTP client against real listeners on loopback: a name that resolves to
//! 127.0.0.1 is refused at connect time, and a redirect from an allowed first hop to a
//! forbidden address is refused before it is followed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use teamster_egress::{EgressError, EgressPolicy, client_builder, refusal};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A listener on `ip` that answers every request with `response` and counts connections.
async fn serve(ip: &str, response: String) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let response = response.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buffer = [0u8; 1024];
                while !request.windows(4).any(|window| window == b"\r\n\r\n") {
                    match stream.read(&mut buffer).await {
                        Ok(0) | Err(_) => return,
                        Ok(read) => request.extend_from_slice(&buffer[..read]),
                    }
                }
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    (address, connections)
}

fn ok_response() -> String {
    "HTTP/1.1 200 OK\r\ncontent-length: 6\r\nconnection: close\r\n\r\nsecret".to_owned()
}

fn redirect_to(location: &str) -> String {
    format!("HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
}

async fn get(policy: EgressPolicy, url: &str) -> Result<String, reqwest::Error> {
    let client = client_builder(Arc::new(policy)).build().unwrap();
    client.get(url).send().await?.text().await
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused_at_connect_time() {
    let (target, connections) = serve("127.0.0.1", ok_response()).await;
    let error = get(EgressPolicy::new(), &format!("http://localhost:{}/", target.port())).await.unwrap_err();
    let refused = refusal(&error).expect("the request failed for another reason");
    assert!(matches!(refused, EgressError::ForbiddenName { reason: "loopback", .. }), "{refused:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 0, "the listener was reached");

    // The operator's allow-list lets the same request through, by name or by network.
    let allowed = EgressPolicy::parse(["localhost"]).unwrap();
    assert_eq!(get(allowed, &format!("http://localhost:{}/", target.port())).await.unwrap(), "secret");
    let allowed = EgressPolicy::parse(["127.0.0.1/32"]).unwrap();
    assert_eq!(get(allowed, &format!("http://localhost:{}/", target.port())).await.unwrap(), "secret");
}

#[tokio::test]
async fn a_redirect_to_a_forbidden_address_is_refused() {
    let (target, connections) = serve("127.0.0.1", ok_response()).await;
    // The first hop is allowed by name; its redirect names a literal loopback address.
    let (first, _) = serve("127.0.0.1", redirect_to(&format!("http://127.0.0.1:{}/", target.port()))).await;
    let error = get(EgressPolicy::parse(["localhost"]).unwrap(), &format!("http://localhost:{}/", first.port()))
        .await
        .unwrap_err();
    let refused = refusal(&error).expect("the request failed for another reason");
    assert!(matches!(refused, EgressError::ForbiddenAddress { reason: "loopback", .. }), "{refused:?}");

    // The first hop is allowed by network (127.0.0.2); its redirect names a host name that
    // resolves to 127.0.0.1, which is not allowed.
    let (second, _) = serve("127.0.0.2", redirect_to(&format!("http://localhost:{}/", target.port()))).await;
    let error = get(EgressPolicy::parse(["127.0.0.2/32"]).unwrap(), &format!("http://127.0.0.2:{}/", second.port()))
        .await
        .unwrap_err();
    let refused = refusal(&error).expect("the request failed for another reason");
    assert!(matches!(refused, EgressError::ForbiddenName { reason: "loopback", .. }), "{refused:?}");
    assert_eq!(connections.load(Ordering::SeqCst), 0, "the redirect's target was reached");
}
