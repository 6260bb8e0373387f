//! `ditto mcp` on stdin/stdout: MCP's stdio transport, one JSON-RPC
//! message a line (framed by `lines`), served by the one [`DittoServer`].
//!
//! Owns the stdio server's lifetime only: its runtime, starting rmcp on
//! the client's streams and stopping when the client closes them. Never
//! handles a tool itself.

use super::{DittoServer, lines};
use rmcp::ServiceExt;

/// Serves MCP on stdin/stdout until the client closes the stream. Calls
/// still under way then are dropped, and their children killed, when the
/// runtime shuts down.
pub fn serve() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(async {
        let (transport, lines) = lines::start(tokio::io::stdin(), tokio::io::stdout());
        let service = match DittoServer::default().serve(transport).await {
            Ok(service) => service,
            Err(e) => {
                lines.finish().await;
                anyhow::bail!("cannot start the MCP server on stdio: {e}");
            }
        };
        let quit = service.waiting().await;
        // Every answer written before the process ends.
        lines.finish().await;
        quit.map_err(|e| anyhow::anyhow!("the MCP server stopped: {e}"))?;
        Ok(())
    });
    // A read of stdin that cannot be cancelled (rmcp stopped with the
    // client's stream still open) is not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}
