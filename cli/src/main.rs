//! `ebbdb`: the command-line tool for an ebbdb database directory.
//!
//! This file owns the command line (clap derive) and the dispatch to one module per group of
//! commands; `fail.rs` owns how an error becomes a message and an exit code, `open.rs` how a
//! directory is opened. Nothing here panics on bad input: every failure is a [`fail::Failure`].

mod dump;
mod fail;
mod inspect;
mod items;
mod load;
mod maintain;
mod open;
mod progress;
mod reader;
mod serve;
mod show;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

/// The exit codes, printed at the end of `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  any other failure (an I/O error, ...)
  2  bad command-line arguments (also a `serve --key` that is not base64)
  3  not found: no database in DIR, or no such container, keyspace or item
  4  refused by the database: invalid input (400), conflict (409), too large (413); also an
     import or put in which any item was refused (the others were written)
  5  the directory is locked by another process (a running program has it open)
  6  corruption: verify found a problem, or a file failed its checks when opening

Testing aid: EBBDB_NOW_UNIX_MS=<milliseconds> pins the clock the database sees (\"now\") to that
Unix time, for reproducible tests and examples; leave it unset for real use.";

/// Inspect, query, verify, compact, export and import an ebbdb database directory.
///
/// A database is a directory. Commands open it exclusively: while another program has it
/// open, they fail at once with "locked by another process" (exit code 5) rather than wait.
#[derive(Debug, Parser)]
#[command(name = "ebbdb", version, after_help = EXIT_CODES, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Containers and keyspaces, live and expired-but-unpurged items, bytes, segments, timers.
    Stats {
        /// The database directory.
        dir: PathBuf,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// The containers and their properties (partition key, defaultTtl, indexing mode, count).
    Containers {
        /// The database directory.
        dir: PathBuf,
        /// Print a JSON array of container properties (the Cosmos REST shape) with counts.
        #[arg(long)]
        json: bool,
    },
    /// Print one item.
    Get {
        /// The database directory.
        dir: PathBuf,
        /// Container id.
        container: String,
        /// Partition key value (a string; see --pk-json).
        pk: String,
        /// Item id.
        id: String,
        #[command(flatten)]
        pk_kind: PkKind,
        /// Print the item as one line of JSON (default: indented).
        #[arg(long)]
        json: bool,
    },
    /// Upsert JSON items from a file or `-` (stdin): one object, a JSON array, or one object per line.
    Put {
        /// The database directory.
        dir: PathBuf,
        /// Container id.
        container: String,
        /// The file to read, or `-` for standard input.
        file: String,
    },
    /// Delete one item.
    Delete {
        /// The database directory.
        dir: PathBuf,
        /// Container id.
        container: String,
        /// Partition key value (a string; see --pk-json).
        pk: String,
        /// Item id.
        id: String,
        #[command(flatten)]
        pk_kind: PkKind,
    },
    /// Run a Cosmos DB SQL query over a container's live items.
    Query {
        /// The database directory.
        dir: PathBuf,
        /// Container id.
        container: String,
        /// The query, e.g. "SELECT * FROM c WHERE c.total > @min".
        sql: String,
        /// A parameter, `@name=value`; the value is JSON if it parses as JSON (`@n=5`,
        /// `@s='"5"'`), else a string (`@s=abc`). Repeatable.
        #[arg(long = "param", value_name = "@NAME=VALUE")]
        params: Vec<String>,
        /// Read only this partition (a string; see --pk-json).
        #[arg(long, value_name = "K")]
        partition_key: Option<String>,
        #[command(flatten)]
        pk_kind: PkKind,
        /// Output format: one JSON value per line, or a table.
        #[arg(long, value_enum, default_value_t = Format::Json)]
        format: Format,
        /// Same as --format json.
        #[arg(long)]
        json: bool,
    },
    /// List the live keys and values of a byte-engine keyspace, in key order.
    ///
    /// Keys and values are printed as text where they are valid UTF-8 (control characters
    /// escaped) and as escaped bytes (\xNN) otherwise.
    Scan {
        /// The database directory.
        dir: PathBuf,
        /// Keyspace name (a container's items are in keyspace `c:<container id>`).
        keyspace: String,
        /// Only keys starting with these bytes (UTF-8).
        #[arg(long, value_name = "P")]
        prefix: Option<String>,
        /// At most this many entries.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// One JSON object per line: `key`/`value` as strings, or `key_hex`/`value_hex` for
        /// bytes that are not UTF-8, and `expires_at` (Unix seconds, null for never).
        #[arg(long)]
        json: bool,
    },
    /// Merge segments now to reclaim the space of expired, deleted and overwritten records.
    Compact {
        /// The database directory.
        dir: PathBuf,
        /// Merge every segment (default: only the ones the compaction policy selects).
        #[arg(long)]
        full: bool,
        /// Print the compaction report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every record, hint and checksum without changing anything; exit 6 on corruption.
    Verify {
        /// The database directory.
        dir: PathBuf,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Export containers to JSON files: per container `<id>.json` (a JSON array of items, what
    /// the Azure Cosmos DB data migration tool reads) and `<id>.container.json` (properties).
    Export {
        /// The database directory.
        dir: PathBuf,
        /// Only this container (default: every container).
        #[arg(long, value_name = "C")]
        container: Option<String>,
        /// Directory to write the files into (created if missing).
        #[arg(long, value_name = "PATH")]
        out: PathBuf,
        /// Write `<id>.ndjson`, one item per line, instead of a JSON array.
        #[arg(long)]
        ndjson: bool,
        /// `remaining`: an item that will expire gets its remaining lifetime as `ttl`;
        /// `original`: items keep their own `ttl` (or none) as stored.
        #[arg(long, value_enum, default_value_t = TtlMode::Remaining)]
        ttl: TtlMode,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Import items from `ebbdb export` output (a directory) or from one JSON array / NDJSON file.
    Import {
        /// The database directory (created if it does not exist).
        dir: PathBuf,
        /// An export directory, or one file of items (then --container is required).
        path: PathBuf,
        /// Only this container from an export directory; the target container for a file.
        #[arg(long, value_name = "C")]
        container: Option<String>,
        /// What to do with an item that is refused: report it and go on, or stop.
        #[arg(long, value_enum, default_value_t = OnError::Skip)]
        on_error: OnError,
        /// Items written per atomic batch (all or nothing).
        #[arg(long, value_name = "N", default_value_t = 100,
              value_parser = clap::value_parser!(u32).range(1..=10_000))]
        batch_size: u32,
        /// Print the summary as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Serve the Azure Cosmos DB gateway REST API over a directory of databases, so the
    /// official Cosmos DB SDKs can use it (until Ctrl-C, which syncs and closes).
    ///
    /// Each Cosmos database is one ebbdb database in a sub-directory of DIR (created when
    /// missing). Every request must carry a master-key signature made with --key.
    Serve {
        /// The directory of databases (one sub-directory each).
        dir: PathBuf,
        /// Address to listen on (`127.0.0.1:0` picks a free port; the first line printed
        /// names it).
        #[arg(long, default_value = "127.0.0.1:8081")]
        addr: String,
        /// The account key (base64) requests are signed with; the default is the Azure Cosmos
        /// DB emulator's well-known key.
        #[arg(long, value_name = "BASE64", default_value = serve::EMULATOR_KEY, hide_default_value = true)]
        key: String,
        /// Seconds a client may take to send a request's headers, and again its body; a
        /// slower one is disconnected (headers) or gets a 408 (body).
        #[arg(long, value_name = "SECS", default_value_t = 30,
              value_parser = clap::value_parser!(u64).range(1..=3600))]
        request_timeout: u64,
    },
}

/// How a partition key argument is read.
#[derive(Debug, Clone, Copy, clap::Args)]
struct PkKind {
    /// Read the partition key as JSON: `5`, `true`, `null`, `'"5"'`, or `undefined` for items
    /// without a partition key value (default: the argument is a string).
    #[arg(long)]
    pk_json: bool,
}

/// Output format of `query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// One JSON value per line.
    Json,
    /// A table with one column per property of the rows.
    Table,
}

/// How `export` writes `ttl`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum TtlMode {
    /// Remaining lifetime (`_ts` + effective TTL − now, at least 1).
    Remaining,
    /// The item's own `ttl` as stored.
    Original,
}

/// What `import` does with a refused item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum OnError {
    /// Report it and import the rest.
    Skip,
    /// Report it and stop; the batch it belongs to is not written.
    Stop,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            f.print();
            ExitCode::from(f.code)
        }
    }
}

fn run(command: Command) -> Result<(), fail::Failure> {
    match command {
        Command::Stats { dir, json } => inspect::stats(&dir, json),
        Command::Containers { dir, json } => inspect::containers(&dir, json),
        Command::Get {
            dir,
            container,
            pk,
            id,
            pk_kind,
            json,
        } => items::get(&dir, &container, &pk, pk_kind.pk_json, &id, json),
        Command::Put {
            dir,
            container,
            file,
        } => items::put(&dir, &container, &file),
        Command::Delete {
            dir,
            container,
            pk,
            id,
            pk_kind,
        } => items::delete(&dir, &container, &pk, pk_kind.pk_json, &id),
        Command::Query {
            dir,
            container,
            sql,
            params,
            partition_key,
            pk_kind,
            format,
            json,
        } => items::query(
            &dir,
            &container,
            &sql,
            &params,
            partition_key.as_deref().map(|k| (k, pk_kind.pk_json)),
            json || format == Format::Json,
        ),
        Command::Scan {
            dir,
            keyspace,
            prefix,
            limit,
            json,
        } => inspect::scan(&dir, &keyspace, prefix.as_deref(), limit, json),
        Command::Compact { dir, full, json } => maintain::compact(&dir, full, json),
        Command::Verify { dir, json } => maintain::verify(&dir, json),
        Command::Export {
            dir,
            container,
            out,
            ndjson,
            ttl,
            json,
        } => dump::export(&dir, container.as_deref(), &out, ndjson, ttl, json),
        Command::Import {
            dir,
            path,
            container,
            on_error,
            batch_size,
            json,
        } => load::import(
            &dir,
            &path,
            container.as_deref(),
            on_error,
            batch_size as usize,
            json,
        ),
        Command::Serve {
            dir,
            addr,
            key,
            request_timeout,
        } => serve::run(
            &dir,
            &addr,
            &key,
            std::time::Duration::from_secs(request_timeout),
        ),
    }
}
