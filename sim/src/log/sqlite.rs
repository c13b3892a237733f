//! A read-only reader of SQLite database files, as much of the file format
//! (<https://www.sqlite.org/fileformat2.html>) as a ROS 2 bag's `.db3` storage needs: the
//! 100-byte header, table B-trees (interior and leaf pages, overflow chains), the record
//! format, the schema table's `CREATE TABLE` column lists, and the committed transactions
//! of a write-ahead log (`-wal`) that was never checkpointed ([`Db::apply_wal`]).
//!
//! Promises: every page number is checked against the file before it is read, every length
//! and offset inside a page against the page, and a payload's length against the caller's
//! limit before anything is allocated for it; a damaged page is a [`SqliteError`] naming the
//! page, never a panic; a page link that loops is caught (a walk visits each page at most
//! once; an overflow chain is as long as its payload needs and no longer). Nothing is
//! written and no lock is taken: the file is read as it is on disk.
//!
//! Not read (each reported by the caller, never misread): `WITHOUT ROWID` tables and indexes
//! (a bag has neither among the tables it reads), UTF-16 databases, and frames of a
//! write-ahead log past its last valid commit.
//!
//! Cost: one seek and one read per page visited; payload buffers the size of the record.

use std::io::{Read, Seek, SeekFrom};

/// The first 16 bytes of every SQLite database file.
pub(super) const MAGIC: &[u8; 16] = b"SQLite format 3\0";

/// Why a database (or one of its pages) cannot be read.
#[derive(Debug, thiserror::Error)]
pub(super) enum SqliteError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The header is not a SQLite 3 header redline can read.
    #[error("SQLite header: {0}")]
    Header(String),
    /// A page is damaged or points somewhere it cannot.
    #[error("page {page}: {why}")]
    Page { page: u32, why: String },
}

fn page_err(page: u32, why: impl Into<String>) -> SqliteError {
    SqliteError::Page {
        page,
        why: why.into(),
    }
}

/// A value of a record column (text and blobs borrow the payload).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Value<'a> {
    Null,
    Int(i64),
    Real(f64),
    Text(&'a [u8]),
    Blob(&'a [u8]),
}

impl<'a> Value<'a> {
    pub(super) fn int(self) -> Option<i64> {
        match self {
            Value::Int(v) => Some(v),
            _ => None,
        }
    }

    pub(super) fn text(self) -> Option<String> {
        match self {
            Value::Text(t) => Some(String::from_utf8_lossy(t).into_owned()),
            _ => None,
        }
    }

    /// The bytes of a blob (or of a text: a bag's data column is declared `BLOB`, but a
    /// column's declared type does not bind what a row stores).
    pub(super) fn bytes(self) -> Option<&'a [u8]> {
        match self {
            Value::Blob(b) | Value::Text(b) => Some(b),
            _ => None,
        }
    }
}

/// One cell of a table leaf page: its row id and the part of its payload stored on the page.
pub(super) struct Cell<'p> {
    pub(super) rowid: i64,
    /// The whole payload's length, bytes.
    pub(super) payload_len: u64,
    /// The payload bytes stored on the leaf page (all of it when `overflow` is `None`).
    pub(super) local: &'p [u8],
    /// First overflow page holding the rest of the payload.
    pub(super) overflow: Option<u32>,
}

/// A table of the schema: its name, root page and declared columns.
#[derive(Clone, Debug)]
pub(super) struct Table {
    pub(super) name: String,
    pub(super) root: u32,
    /// Column names in declaration order (as the record stores them).
    pub(super) columns: Vec<String>,
    /// The column declared `INTEGER PRIMARY KEY`: an alias of the row id, stored as NULL.
    pub(super) rowid_alias: Option<usize>,
    pub(super) without_rowid: bool,
}

impl Table {
    /// The index of column `name` (ASCII case-insensitive, as SQL compares names).
    pub(super) fn column(&self, name: &str) -> Option<usize> {
        self.columns
            .iter()
            .position(|c| c.eq_ignore_ascii_case(name))
    }
}

/// An open database: the header's geometry.
#[derive(Clone, Debug)]
pub(super) struct Db {
    pub(super) page_size: u32,
    /// Bytes of each page the B-tree uses (the page size less the reserved bytes).
    usable: u32,
    /// Pages in the file (its length over the page size).
    pub(super) page_count: u32,
    /// The header says write-ahead-log mode (pages may wait in a `-wal` file).
    pub(super) wal: bool,
    /// Pages committed to the write-ahead log and not yet written back ([`Db::apply_wal`]):
    /// read in place of the file's.
    wal_pages: std::collections::BTreeMap<u32, Vec<u8>>,
}

/// What [`Db::apply_wal`] took from a write-ahead log.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct WalApplied {
    /// Committed transactions read.
    pub(super) commits: usize,
    /// Distinct pages they hold.
    pub(super) pages: usize,
    /// Bytes after the last valid commit (an unfinished transaction, or damage): not read.
    pub(super) unused_bytes: usize,
}

/// B-tree page types (the first byte of the page header).
const INTERIOR_TABLE: u8 = 0x05;
const LEAF_TABLE: u8 = 0x0D;

/// The parsed header of a table B-tree page.
struct PageHead {
    leaf: bool,
    /// Offset of the cell pointer array.
    pointers: usize,
    cells: usize,
    /// Interior pages: the right-most child.
    right: u32,
}

impl Db {
    /// Reads the header of the database in `f` (`file_len` bytes).
    pub(super) fn open<R: Read + Seek>(f: &mut R, file_len: u64) -> Result<Db, SqliteError> {
        let mut h = [0u8; 100];
        f.seek(SeekFrom::Start(0))?;
        f.read_exact(&mut h).map_err(|e| {
            SqliteError::Header(format!(
                "the file is shorter than the 100-byte header ({e})"
            ))
        })?;
        if &h[..16] != MAGIC {
            return Err(SqliteError::Header("no `SQLite format 3` magic".into()));
        }
        let page_size = match u16::from_be_bytes([h[16], h[17]]) {
            1 => 65536,
            p if p >= 512 && p.is_power_of_two() => u32::from(p),
            p => {
                return Err(SqliteError::Header(format!(
                    "page size {p} is not a power of two in 512..=65536"
                )))
            }
        };
        let reserved = u32::from(h[20]);
        let usable = page_size - reserved;
        if usable < 480 {
            return Err(SqliteError::Header(format!(
                "{reserved} reserved bytes leave {usable} usable bytes per page (at least 480)"
            )));
        }
        let encoding = u32::from_be_bytes([h[56], h[57], h[58], h[59]]);
        if encoding > 1 {
            return Err(SqliteError::Header(format!(
                "text encoding {} (UTF-16); redline reads UTF-8 databases, as ROS 2 writes them",
                if encoding == 2 {
                    "UTF-16le"
                } else {
                    "UTF-16be or unknown"
                }
            )));
        }
        let page_count = u32::try_from(file_len / u64::from(page_size)).unwrap_or(u32::MAX);
        Ok(Db {
            page_size,
            usable,
            page_count,
            wal: h[18] == 2 || h[19] == 2,
            wal_pages: Default::default(),
        })
    }

    /// Reads the committed transactions of the write-ahead log `wal` (the bytes of the
    /// database's `-wal` file, which a recorder that stopped without a checkpoint leaves):
    /// frames whose salts match the WAL header and whose cumulative checksum holds, up to
    /// the last commit frame, as SQLite itself recovers them; their pages (the latest of
    /// each) are then read in place of the file's, and the database has the size the last
    /// commit gives it. Errors when the header is not a WAL header for this page size.
    pub(super) fn apply_wal(&mut self, wal: &[u8]) -> Result<WalApplied, String> {
        const FRAME_HEAD: usize = 24;
        let be = |b: &[u8], i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if wal.len() < 32 {
            return Err(format!("{} bytes, shorter than a WAL header", wal.len()));
        }
        let big_endian = match be(wal, 0) {
            0x377f_0682 => false,
            0x377f_0683 => true,
            m => return Err(format!("magic {m:#010x} is not a write-ahead log's")),
        };
        if be(wal, 8) != self.page_size {
            return Err(format!(
                "its page size {} is not the database's {}",
                be(wal, 8),
                self.page_size
            ));
        }
        let checksum = |mut s: (u32, u32), data: &[u8]| {
            for w in data.chunks_exact(8) {
                let word = |i: usize| {
                    let b = [w[i], w[i + 1], w[i + 2], w[i + 3]];
                    if big_endian {
                        u32::from_be_bytes(b)
                    } else {
                        u32::from_le_bytes(b)
                    }
                };
                s.0 = s.0.wrapping_add(word(0)).wrapping_add(s.1);
                s.1 = s.1.wrapping_add(word(4)).wrapping_add(s.0);
            }
            s
        };
        let mut sum = checksum((0, 0), &wal[..24]);
        if sum != (be(wal, 24), be(wal, 28)) {
            return Err("its header checksum does not hold".into());
        }
        let salts = (be(wal, 16), be(wal, 20));
        let frame_len = FRAME_HEAD + self.page_size as usize;
        let (mut pending, mut committed) = (Vec::new(), Vec::new());
        let (mut commits, mut db_pages, mut used) = (0, None, 32);
        let mut at = 32;
        while at + frame_len <= wal.len() {
            let f = &wal[at..at + frame_len];
            if (be(f, 8), be(f, 12)) != salts {
                break;
            }
            sum = checksum(checksum(sum, &f[..8]), &f[FRAME_HEAD..]);
            if sum != (be(f, 16), be(f, 20)) {
                break;
            }
            pending.push((be(f, 0), at + FRAME_HEAD));
            at += frame_len;
            if be(f, 4) != 0 {
                // A commit frame: the transaction is whole.
                committed.append(&mut pending);
                commits += 1;
                db_pages = Some(be(f, 4));
                used = at;
            }
        }
        for (n, off) in committed {
            if n != 0 {
                self.wal_pages
                    .insert(n, wal[off..off + self.page_size as usize].to_vec());
            }
        }
        if let Some(n) = db_pages {
            // No bigger than the pages that exist (the file's and the log's): a damaged
            // size cannot make a walk allocate for pages that are nowhere.
            let highest = self.wal_pages.keys().next_back().copied().unwrap_or(0);
            self.page_count = n.min(self.page_count.max(highest));
        }
        Ok(WalApplied {
            commits,
            pages: self.wal_pages.len(),
            unused_bytes: wal.len() - used,
        })
    }

    /// Reads page `n` (1-based) into `buf`.
    fn read_page<R: Read + Seek>(
        &self,
        f: &mut R,
        n: u32,
        buf: &mut Vec<u8>,
    ) -> Result<(), SqliteError> {
        if n == 0 || n > self.page_count {
            return Err(page_err(
                n,
                format!("outside the file's {} pages", self.page_count),
            ));
        }
        if let Some(p) = self.wal_pages.get(&n) {
            buf.clear();
            buf.extend_from_slice(p);
            return Ok(());
        }
        buf.resize(self.page_size as usize, 0);
        f.seek(SeekFrom::Start(
            u64::from(n - 1) * u64::from(self.page_size),
        ))?;
        f.read_exact(buf)
            .map_err(|e| page_err(n, format!("cannot be read ({e})")))?;
        Ok(())
    }

    /// The header of table B-tree page `n` held in `page`.
    fn head(&self, n: u32, page: &[u8]) -> Result<PageHead, SqliteError> {
        let at = if n == 1 { 100 } else { 0 };
        let usable = self.usable as usize;
        let byte = |i: usize| page[at + i];
        let leaf = match byte(0) {
            LEAF_TABLE => true,
            INTERIOR_TABLE => false,
            t => {
                return Err(page_err(
                    n,
                    format!("type {t:#04x} is not a table B-tree page (index or damaged page)"),
                ))
            }
        };
        let cells = usize::from(u16::from_be_bytes([byte(3), byte(4)]));
        let pointers = at + if leaf { 8 } else { 12 };
        if pointers + 2 * cells > usable {
            return Err(page_err(n, format!("{cells} cells do not fit the page")));
        }
        let right = if leaf {
            0
        } else {
            u32::from_be_bytes([byte(8), byte(9), byte(10), byte(11)])
        };
        Ok(PageHead {
            leaf,
            pointers,
            cells,
            right,
        })
    }

    /// The offset of cell `i` of a page, checked to lie inside the usable part.
    fn cell_at(&self, n: u32, page: &[u8], h: &PageHead, i: usize) -> Result<usize, SqliteError> {
        let p = h.pointers + 2 * i;
        let off = usize::from(u16::from_be_bytes([page[p], page[p + 1]]));
        if off < h.pointers + 2 * h.cells || off >= self.usable as usize {
            return Err(page_err(
                n,
                format!("cell {i} points at byte {off}, outside the cell area"),
            ));
        }
        Ok(off)
    }

    /// The leaf pages of the table B-tree rooted at `root`, in row-id order. A damaged
    /// interior page, or a link to a page outside the file or already visited (a loop), is
    /// pushed to `damage` and its subtree skipped: the leaves that can be reached still
    /// come back. Allocates a bit per page of the file to catch loops.
    pub(super) fn table_leaves<R: Read + Seek>(
        &self,
        f: &mut R,
        root: u32,
        damage: &mut Vec<SqliteError>,
    ) -> Vec<u32> {
        let mut seen = vec![0u64; (self.page_count as usize).div_ceil(64) + 1];
        let mut leaves = Vec::new();
        let mut stack = vec![root];
        let mut page = Vec::new();
        while let Some(n) = stack.pop() {
            let (w, b) = (n as usize / 64, n as usize % 64);
            if n == 0 || n > self.page_count {
                damage.push(page_err(
                    n,
                    format!("is outside the file's {} pages", self.page_count),
                ));
                continue;
            }
            if seen[w] & (1 << b) != 0 {
                damage.push(page_err(n, "is reached twice: the B-tree loops"));
                continue;
            }
            seen[w] |= 1 << b;
            let children = self.read_page(f, n, &mut page).and_then(|()| {
                let h = self.head(n, &page)?;
                if h.leaf {
                    return Ok(None);
                }
                let mut kids = Vec::with_capacity(h.cells + 1);
                for i in 0..h.cells {
                    let off = self.cell_at(n, &page, &h, i)?;
                    let child = page
                        .get(off..off + 4)
                        .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                        .ok_or_else(|| page_err(n, format!("cell {i} is cut by the page's end")))?;
                    kids.push(child);
                }
                kids.push(h.right);
                Ok(Some(kids))
            });
            match children {
                Ok(None) => leaves.push(n),
                // Right to left on the stack, so they pop in row-id order.
                Ok(Some(kids)) => stack.extend(kids.into_iter().rev()),
                Err(e) => damage.push(e),
            }
        }
        leaves
    }

    /// Reads page `n` (1-based) into `page` for [`Db::leaf_cells`].
    pub(super) fn read_leaf<R: Read + Seek>(
        &self,
        f: &mut R,
        n: u32,
        page: &mut Vec<u8>,
    ) -> Result<(), SqliteError> {
        self.read_page(f, n, page)
    }

    /// Calls `each` with the cells of leaf page `n` (read into `page` by
    /// [`Db::read_leaf`]) in order. A damaged cell ends the page with an error (the cells
    /// before it were passed on); so does an error `each` returns.
    pub(super) fn leaf_cells<'p>(
        &self,
        n: u32,
        page: &'p [u8],
        mut each: impl FnMut(Cell<'p>) -> Result<(), SqliteError>,
    ) -> Result<(), SqliteError> {
        let h = self.head(n, page)?;
        if !h.leaf {
            return Err(page_err(n, "an interior page where a leaf was listed"));
        }
        let usable = self.usable as usize;
        for i in 0..h.cells {
            let off = self.cell_at(n, page, &h, i)?;
            let cell = &page[off..usable];
            let cut = || page_err(n, format!("cell {i} is cut by the page's end"));
            let (payload_len, a) = varint(cell).ok_or_else(cut)?;
            let (rowid, b) = varint(&cell[a..]).ok_or_else(cut)?;
            let payload_len = payload_len as u64;
            let (local_len, spills) = self.local_len(payload_len);
            let start = a + b;
            let local = cell.get(start..start + local_len).ok_or_else(cut)?;
            let overflow = if spills {
                let p = cell
                    .get(start + local_len..start + local_len + 4)
                    .ok_or_else(cut)?;
                Some(u32::from_be_bytes([p[0], p[1], p[2], p[3]]))
            } else {
                None
            };
            each(Cell {
                rowid,
                payload_len,
                local,
                overflow,
            })?;
        }
        Ok(())
    }

    /// Bytes of a table leaf cell's payload of `len` bytes kept on the leaf page, and whether
    /// the rest spills to overflow pages (the file format's rule).
    fn local_len(&self, len: u64) -> (usize, bool) {
        let u = u64::from(self.usable);
        let x = u - 35;
        if len <= x {
            return (len as usize, false);
        }
        let m = (u - 12) * 32 / 255 - 23;
        let k = m + (len - m) % (u - 4);
        ((if k <= x { k } else { m }) as usize, true)
    }

    /// The whole payload of `cell` (its local bytes, then its overflow chain) into `out`;
    /// refused when longer than `max_len`.
    pub(super) fn payload<R: Read + Seek>(
        &self,
        f: &mut R,
        leaf: u32,
        cell: &Cell<'_>,
        max_len: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), SqliteError> {
        if cell.payload_len > max_len {
            return Err(page_err(
                leaf,
                format!(
                    "row {} holds {} bytes, over the limit of {max_len}",
                    cell.rowid, cell.payload_len
                ),
            ));
        }
        out.clear();
        // Grown page by page as the chain is read: a damaged size allocates no more than
        // the pages that are really there.
        out.extend_from_slice(cell.local);
        let total = cell.payload_len as usize;
        let per_page = self.usable as usize - 4;
        let mut next = cell.overflow;
        let mut page = Vec::new();
        while out.len() < total {
            let Some(n) = next.filter(|&n| n != 0) else {
                return Err(page_err(
                    leaf,
                    format!(
                        "row {}'s overflow chain ends after {} of its {total} bytes",
                        cell.rowid,
                        out.len()
                    ),
                ));
            };
            self.read_page(f, n, &mut page)?;
            let take = per_page.min(total - out.len());
            out.extend_from_slice(&page[4..4 + take]);
            next = Some(u32::from_be_bytes([page[0], page[1], page[2], page[3]]));
        }
        Ok(())
    }

    /// The tables of the schema (`sqlite_schema`, rooted at page 1), with their columns.
    pub(super) fn tables<R: Read + Seek>(
        &self,
        f: &mut R,
        max_len: u64,
    ) -> Result<Vec<Table>, SqliteError> {
        let mut tables = Vec::new();
        let mut page = Vec::new();
        let mut payload = Vec::new();
        let mut damage = Vec::new();
        let leaves = self.table_leaves(f, 1, &mut damage);
        if let Some(e) = damage.into_iter().next() {
            return Err(e);
        }
        for leaf in leaves {
            self.read_leaf(f, leaf, &mut page)?;
            let mut cells = Vec::new();
            self.leaf_cells(leaf, &page, |c| {
                cells.push(c);
                Ok(())
            })?;
            for cell in cells {
                let rowid = cell.rowid;
                self.payload(f, leaf, &cell, max_len, &mut payload)?;
                let rec = Record::parse(&payload)
                    .map_err(|why| page_err(leaf, format!("schema row {rowid}: {why}")))?;
                let text = |i| rec.value(i).and_then(Value::text).unwrap_or_default();
                if text(0) != "table" {
                    continue;
                }
                let sql = text(4);
                let Some(cols) = create_table_columns(&sql) else {
                    continue;
                };
                let root = rec.value(3).and_then(Value::int).unwrap_or(0);
                tables.push(Table {
                    name: text(1),
                    root: u32::try_from(root).unwrap_or(0),
                    columns: cols.names,
                    rowid_alias: cols.rowid_alias,
                    without_rowid: cols.without_rowid,
                });
            }
        }
        Ok(tables)
    }
}

/// A SQLite varint at the start of `b`: its value and length (1 to 9 bytes), or `None` when
/// `b` ends first.
pub(super) fn varint(b: &[u8]) -> Option<(i64, usize)> {
    let mut v: u64 = 0;
    for i in 0..9 {
        let byte = *b.get(i)?;
        if i == 8 {
            return Some(((v << 8 | u64::from(byte)) as i64, 9));
        }
        v = v << 7 | u64::from(byte & 0x7F);
        if byte & 0x80 == 0 {
            return Some((v as i64, i + 1));
        }
    }
    None
}

/// A record (a row's payload): the serial type and offset of each column. The payload may
/// be a prefix of the record (a leaf's local bytes): columns past its end read as `None`.
pub(super) struct Record<'a> {
    bytes: &'a [u8],
    /// (serial type, offset of the value in `bytes`)
    cols: Vec<(i64, usize)>,
}

impl<'a> Record<'a> {
    /// Parses the record header. Errors when the header itself is cut or malformed.
    pub(super) fn parse(bytes: &'a [u8]) -> Result<Record<'a>, String> {
        let (hlen, mut at) = varint(bytes).ok_or("record header cut")?;
        let hlen = usize::try_from(hlen).map_err(|_| "negative record header length")?;
        if hlen > bytes.len() || hlen < at {
            return Err(format!(
                "record header of {hlen} bytes does not fit its {} bytes",
                bytes.len()
            ));
        }
        let mut cols = Vec::new();
        let mut off = hlen;
        while at < hlen {
            let (t, n) = varint(&bytes[at..hlen]).ok_or("record header cut")?;
            at += n;
            cols.push((t, off));
            off = off.saturating_add(
                serial_len(t).ok_or_else(|| format!("serial type {t} is reserved"))?,
            );
        }
        Ok(Record { bytes, cols })
    }

    /// Column `i`'s value, or `None` when the record has fewer columns (a column added by
    /// `ALTER TABLE` after the row was written reads as its default; redline treats it as
    /// absent) or the value lies past the bytes held.
    pub(super) fn value(&self, i: usize) -> Option<Value<'a>> {
        let &(t, off) = self.cols.get(i)?;
        let len = serial_len(t)?;
        let b = self.bytes.get(off..off.checked_add(len)?)?;
        let int = |b: &[u8]| {
            let mut v = if b[0] & 0x80 != 0 { -1i64 } else { 0 };
            for &x in b {
                v = v << 8 | i64::from(x);
            }
            v
        };
        Some(match t {
            0 => Value::Null,
            1..=6 => Value::Int(int(b)),
            7 => Value::Real(f64::from_bits(u64::from_be_bytes(b.try_into().ok()?))),
            8 => Value::Int(0),
            9 => Value::Int(1),
            t if t >= 12 && t % 2 == 0 => Value::Blob(b),
            _ => Value::Text(b),
        })
    }
}

/// Bytes of a value of serial type `t`; `None` for the reserved types 10 and 11 (and
/// negative ones, which a varint cannot hold in a valid file).
fn serial_len(t: i64) -> Option<usize> {
    Some(match t {
        0 | 8 | 9 => 0,
        1 => 1,
        2 => 2,
        3 => 3,
        4 => 4,
        5 => 6,
        6 | 7 => 8,
        t if t >= 12 => usize::try_from((t - 12) / 2).ok()?,
        _ => return None,
    })
}

/// The columns a `CREATE TABLE` statement declares.
#[derive(Debug, PartialEq)]
pub(super) struct Columns {
    pub(super) names: Vec<String>,
    pub(super) rowid_alias: Option<usize>,
    pub(super) without_rowid: bool,
}

/// The columns of `CREATE TABLE name (col type constraints, ..., table constraints)
/// [WITHOUT ROWID]`, or `None` for a statement without a column list (`AS SELECT`). Names
/// may be quoted (`"x"`, `` `x` ``, `[x]`, `'x'`); table constraints (`CONSTRAINT`,
/// `PRIMARY KEY (...)`, `UNIQUE`, `CHECK`, `FOREIGN KEY`) are not columns.
pub(super) fn create_table_columns(sql: &str) -> Option<Columns> {
    let open = sql.find('(')?;
    let b = sql.as_bytes();
    let mut parts = Vec::new();
    let (mut depth, mut start, mut i) = (0usize, open + 1, open + 1);
    let mut close = None;
    while i < b.len() {
        match b[i] {
            q @ (b'"' | b'\'' | b'`') => {
                i += 1;
                while i < b.len() && b[i] != q {
                    i += 1;
                }
            }
            b'[' => {
                while i < b.len() && b[i] != b']' {
                    i += 1;
                }
            }
            b'(' => depth += 1,
            b')' if depth == 0 => {
                parts.push(&sql[start..i]);
                close = Some(i);
                break;
            }
            b')' => depth -= 1,
            b',' if depth == 0 => {
                parts.push(&sql[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    let close = close?;
    let mut names = Vec::new();
    let mut rowid_alias = None;
    for part in parts {
        let part = part.trim();
        let (name, rest) = first_name(part);
        let keyword = name.to_ascii_uppercase();
        let quoted = part.starts_with(['"', '`', '[', '\'']);
        if !quoted
            && ["CONSTRAINT", "PRIMARY", "UNIQUE", "CHECK", "FOREIGN"].contains(&keyword.as_str())
        {
            continue;
        }
        let rest: String = rest
            .to_ascii_uppercase()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        if rest.starts_with("INTEGER")
            && rest.contains("PRIMARY KEY")
            && !rest.contains("PRIMARY KEY DESC")
        {
            rowid_alias = Some(names.len());
        }
        names.push(name);
    }
    let tail = sql[close + 1..].to_ascii_uppercase();
    let without_rowid = tail
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .contains("WITHOUT ROWID");
    Some(Columns {
        names,
        rowid_alias,
        without_rowid,
    })
}

/// The first name of a column definition (unquoted) and the text after it.
fn first_name(s: &str) -> (String, &str) {
    let close = match s.chars().next() {
        Some('"') => Some('"'),
        Some('`') => Some('`'),
        Some('\'') => Some('\''),
        Some('[') => Some(']'),
        _ => None,
    };
    match close {
        Some(c) => match s[1..].find(c) {
            Some(end) => (s[1..1 + end].to_string(), &s[2 + end..]),
            None => (s[1..].to_string(), ""),
        },
        None => {
            let end = s
                .find(|ch: char| ch.is_whitespace() || ch == '(')
                .unwrap_or(s.len());
            (s[..end].to_string(), &s[end..])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_of_one_to_nine_bytes() {
        assert_eq!(varint(&[0x05]), Some((5, 1)));
        assert_eq!(varint(&[0x81, 0x00]), Some((128, 2)));
        assert_eq!(varint(&[0xFF, 0x7F]), Some((0x3FFF, 2)));
        // Nine bytes: 8 × 7 bits then a whole byte: all ones is -1.
        assert_eq!(varint(&[0xFF; 9]), Some((-1, 9)));
        assert_eq!(varint(&[0x81]), None, "cut");
        assert_eq!(varint(&[]), None);
    }

    #[test]
    fn records_read_every_serial_type() {
        // header: len 8, types NULL, int8 (-2), int16, float, 0, 1, blob(2), text(1)
        let mut r = vec![9u8, 0, 1, 2, 7, 8, 9, 16, 15];
        r.extend([0xFE, 0x01, 0x00]);
        r.extend(1.5f64.to_bits().to_be_bytes());
        r.extend([0xAA, 0xBB, b'x']);
        let rec = Record::parse(&r).unwrap();
        assert_eq!(rec.value(0), Some(Value::Null));
        assert_eq!(rec.value(1), Some(Value::Int(-2)));
        assert_eq!(rec.value(2), Some(Value::Int(256)));
        assert_eq!(rec.value(3), Some(Value::Real(1.5)));
        assert_eq!(rec.value(4), Some(Value::Int(0)));
        assert_eq!(rec.value(5), Some(Value::Int(1)));
        assert_eq!(rec.value(6), Some(Value::Blob(&[0xAA, 0xBB])));
        assert_eq!(rec.value(7), Some(Value::Text(b"x")));
        assert_eq!(rec.value(8), None);
        // A prefix: the header and the first values only.
        let cut = Record::parse(&r[..12]).unwrap();
        assert_eq!(cut.value(2), Some(Value::Int(256)));
        assert_eq!(cut.value(3), None);
        assert!(Record::parse(&r[..5]).is_err(), "header cut");
        assert!(Record::parse(&[2, 10]).is_err(), "reserved serial type");
    }

    #[test]
    fn create_table_statements_as_ros2_and_others_write_them() {
        let c = create_table_columns(
            "CREATE TABLE messages(id INTEGER PRIMARY KEY,topic_id INTEGER NOT NULL,timestamp INTEGER NOT NULL, data BLOB NOT NULL)",
        )
        .unwrap();
        assert_eq!(c.names, ["id", "topic_id", "timestamp", "data"]);
        assert_eq!(c.rowid_alias, Some(0));
        assert!(!c.without_rowid);
        let c = create_table_columns(
            "CREATE TABLE \"t\" (\n  [a b] integer  primary   key,\n  `c` TEXT DEFAULT 'x,(y)',\n  d NUMERIC(10, 2),\n  CONSTRAINT pk UNIQUE (c, d),\n  FOREIGN KEY (c) REFERENCES u(v)\n) WITHOUT ROWID",
        )
        .unwrap();
        assert_eq!(c.names, ["a b", "c", "d"]);
        assert_eq!(c.rowid_alias, Some(0));
        assert!(c.without_rowid);
        assert_eq!(create_table_columns("CREATE TABLE x AS SELECT 1"), None);
        let c = create_table_columns("CREATE TABLE t(id INTEGER, PRIMARY KEY(id DESC))").unwrap();
        assert_eq!((c.names.len(), c.rowid_alias), (1, None));
    }

    #[test]
    fn local_payload_sizes_follow_the_file_format() {
        let db = Db {
            page_size: 4096,
            usable: 4096,
            page_count: 1,
            wal: false,
            wal_pages: Default::default(),
        };
        assert_eq!(db.local_len(4061), (4061, false), "X = U - 35 fits");
        // M = (4084 · 32 / 255) − 23 = 489; K = M + (P − M) mod 4092.
        // K = 4062 > X: M.
        assert_eq!(db.local_len(4062), (489, true));
        // K = 489 + 99511 mod 4092 = 1792.
        assert_eq!(db.local_len(100_000), (1792, true));
        assert_eq!(
            db.local_len(489 + 4092 * 3 + 4000),
            (489, true),
            "K past X: M"
        );
    }

    #[test]
    fn write_ahead_logs_need_their_magic_page_size_and_header_checksum() {
        let mut db = Db {
            page_size: 512,
            usable: 512,
            page_count: 3,
            wal: true,
            wal_pages: Default::default(),
        };
        let mut h = vec![0u8; 32];
        assert!(db.apply_wal(&h[..20]).unwrap_err().contains("shorter"));
        assert!(db.apply_wal(&h).unwrap_err().contains("magic"));
        h[..4].copy_from_slice(&0x377f_0682u32.to_be_bytes());
        h[8..12].copy_from_slice(&4096u32.to_be_bytes());
        assert!(db.apply_wal(&h).unwrap_err().contains("page size 4096"));
        h[8..12].copy_from_slice(&512u32.to_be_bytes());
        assert!(db.apply_wal(&h).unwrap_err().contains("checksum"));
        // The header's checksum: words little-endian (magic ...682), s0 += x0 + s1, s1 +=
        // x1 + s0, over its first 24 bytes.
        let (mut s0, mut s1) = (0u32, 0u32);
        for w in h[..24].chunks_exact(8) {
            s0 = s0
                .wrapping_add(u32::from_le_bytes(w[..4].try_into().unwrap()))
                .wrapping_add(s1);
            s1 = s1
                .wrapping_add(u32::from_le_bytes(w[4..].try_into().unwrap()))
                .wrapping_add(s0);
        }
        h[24..28].copy_from_slice(&s0.to_be_bytes());
        h[28..32].copy_from_slice(&s1.to_be_bytes());
        // A valid header without frames: nothing committed, nothing changes.
        let applied = db.apply_wal(&h).unwrap();
        assert_eq!(
            (applied.commits, applied.pages, applied.unused_bytes),
            (0, 0, 0)
        );
        assert_eq!(db.page_count, 3);
    }
}
