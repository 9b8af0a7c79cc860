"""Split SQL text into statements, with line numbers, at the token level.

Rules: ``;`` at parenthesis depth 0 ends a statement; ``GO`` alone on a line ends a T-SQL batch;
in T-SQL (and inside procedure bodies of every dialect) a statement also ends where the next
statement's first keyword appears at depth 0 (``SELECT`` after ``INSERT ... )`` or a set operator
continues the statement). ``CREATE PROCEDURE`` / ``FUNCTION`` with a ``BEGIN ... END`` body stays one
chunk (T-SQL: to the end of its batch); its body is split again by :func:`split_body`.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.dialects.dialect import Dialect
from sqlglot.tokens import Token, TokenType

__all__ = ["Chunk", "split_statements", "split_body", "STATEMENT_STARTS", "CONTROL"]

T = TokenType
#: Tokens that start a data statement.
STATEMENT_STARTS = {T.SELECT, T.WITH, T.INSERT, T.UPDATE, T.DELETE, T.MERGE, T.CREATE, T.ALTER, T.DROP,
                    T.TRUNCATE, T.USE, T.COPY, T.REPLACE}
_START_WORDS = {"TRUNCATE", "EXEC", "EXECUTE", "UNLOAD", "CACHE", "OPTIMIZE", "VACUUM", "ANALYZE"}
#: Control-flow words that start a new chunk in keyword mode (the chunk itself is control, not data).
CONTROL = {"IF", "ELSE", "WHILE", "BEGIN", "END", "DECLARE", "SET", "PRINT", "RETURN", "RAISERROR", "THROW",
           "COMMIT", "ROLLBACK", "OPEN", "CLOSE", "FETCH", "DEALLOCATE", "GOTO", "BREAK", "CONTINUE",
           "EXEC", "EXECUTE", "ELSIF", "ELSEIF", "LOOP", "FOR", "CALL", "LET", "FOREACH", "RAISE"}
_SET_OPS = {T.UNION, T.EXCEPT, T.INTERSECT, T.ALL, T.DISTINCT}
_ROUTINE_WORDS = {"PROCEDURE", "PROC", "FUNCTION", "TRIGGER"}


@dataclass
class Chunk:
    """A statement's tokens and text span in the original text (``line`` 1-based)."""

    tokens: list[Token]
    text: str
    line: int
    end_line: int
    routine: bool = False


def _word(tok: Token) -> str:
    return tok.text.upper()


def _is_start(tok: Token) -> bool:
    return tok.token_type in STATEMENT_STARTS or _word(tok) in _START_WORDS


def _is_routine(tokens: list[Token]) -> bool:
    words = [_word(t) for t in tokens[:6]]
    return bool(words) and words[0] in ("CREATE", "ALTER") and any(w in _ROUTINE_WORDS for w in words[1:6])


def _chunk(text: str, toks: list[Token], routine: bool = False) -> Chunk:
    start, end = toks[0].start, toks[-1].end
    # token offsets are inclusive; widen over an opening quote / bracket the token text dropped
    return Chunk(toks, text[start:end + 1], toks[0].line, toks[-1].line, routine)


def tokenize(text: str, dialect: str) -> list[Token]:
    """The dialect's tokens; a ``BEGIN`` the tokenizer took for a command is opened up again."""
    toks = Dialect.get_or_raise(dialect).tokenize(text)
    if not any(t.token_type == T.COMMAND and t.text.upper() == "BEGIN" for t in toks):
        return toks
    out: list[Token] = []
    i = 0
    while i < len(toks):
        tok = toks[i]
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if tok.token_type == T.COMMAND and tok.text.upper() == "BEGIN" and nxt is not None \
                and nxt.token_type == T.STRING:
            pos = text.find(nxt.text, tok.end + 1)
            out.append(Token(T.BEGIN, tok.text, tok.line, tok.col, tok.start, tok.end))
            if pos >= 0:
                base = text.count("\n", 0, pos)
                for sub in tokenize(nxt.text, dialect):
                    out.append(Token(sub.token_type, sub.text, sub.line + base, sub.col, sub.start + pos,
                                     sub.end + pos, sub.comments))
                i += 2
                continue
        out.append(tok)
        i += 1
    return out


def split_statements(text: str, dialect: str, keyword_mode: bool = False,
                     tokens: list[Token] | None = None) -> list[Chunk]:
    """The statements of ``text``; routines (procedures, functions) come back whole, ``routine=True``."""
    toks = tokens if tokens is not None else tokenize(text, dialect)
    chunks: list[Chunk] = []
    cur: list[Token] = []
    depth = case_depth = block_depth = 0
    routine = False
    verb: str | None = None      # the current statement's main verb once seen
    wants_query = False          # INSERT / CREATE ... AS / WITH: a SELECT still belongs to it

    def close() -> None:
        nonlocal cur, routine, verb, wants_query, block_depth, case_depth
        if cur:
            chunks.append(_chunk(text, cur, routine))
        cur, routine, verb, wants_query, block_depth, case_depth = [], False, None, False, 0, 0

    for i, tok in enumerate(toks):
        tt, word = tok.token_type, _word(tok)
        if tt == T.COMMAND and word == "GO" or (word == "GO" and not cur and dialect in ("tsql", "fabric")):
            close()
            continue
        if routine:
            # a routine runs to its matching END (or, in T-SQL, to the end of the batch)
            cur.append(tok)
            if tt == T.CASE:
                case_depth += 1
            elif word == "BEGIN":
                nxt = _word(toks[i + 1]) if i + 1 < len(toks) else ";"
                if nxt not in ("TRAN", "TRANSACTION", "WORK", ";", "DISTRIBUTED"):
                    block_depth += 1
            elif tt == T.END:
                nxt = _word(toks[i + 1]) if i + 1 < len(toks) else ""
                if case_depth:
                    case_depth -= 1
                elif nxt in ("IF", "LOOP", "WHILE", "REPEAT", "FOR", "CASE", "TRY", "CATCH"):
                    pass
                else:
                    block_depth -= 1
                    if block_depth <= 0 and dialect not in ("tsql", "fabric"):
                        close()
            elif tt == T.SEMICOLON and block_depth <= 0 and dialect not in ("tsql", "fabric") \
                    and any(_word(t) == "BEGIN" for t in cur) is False and len(cur) > 1:
                cur.pop()
                close()
            continue
        if tt == T.SEMICOLON:         # also at depth > 0: an unbalanced statement must not swallow the file
            close()
            depth = 0
            continue
        if tt == T.L_PAREN:
            depth += 1
        elif tt == T.R_PAREN:
            depth = max(0, depth - 1)
        if not cur:
            cur.append(tok)
            if _is_routine(toks[i:i + 6]):
                routine = True
            verb = word
            wants_query = word in ("INSERT", "WITH", "CREATE", "REPLACE", "MERGE", "ALTER", "CACHE")
            continue
        if keyword_mode and depth == 0:
            prev = cur[-1]
            starts_new = False
            if tt == T.CASE:
                case_depth += 1
            elif tt == T.END and case_depth:
                case_depth -= 1
            elif case_depth == 0 and (_is_start(tok) or word in CONTROL) and verb not in CONTROL_NO_SPLIT:
                starts_new = True
                following = toks[i + 1] if i + 1 < len(toks) else None
                if tt in (T.SELECT, T.WITH) and (prev.token_type in _SET_OPS or prev.token_type == T.ALIAS
                                                 or wants_query or prev.token_type == T.L_PAREN):
                    starts_new = False
                elif tt == T.WITH and following is not None and following.token_type == T.L_PAREN:
                    starts_new = False          # a table hint: FROM t WITH (NOLOCK)
                elif tt in (T.INSERT, T.UPDATE, T.DELETE, T.MERGE) and (
                        verb == "MERGE" or (verb == "WITH" and wants_query)):
                    starts_new = False
                elif word == "SET" and verb in ("UPDATE", "MERGE"):
                    starts_new = False
                elif tt in (T.SELECT,) and verb in ("INSERT",) and prev.token_type == T.R_PAREN and wants_query:
                    starts_new = False
                elif word in ("FOR",) and verb in ("SELECT", "WITH"):
                    starts_new = False   # FOR XML / FOR UPDATE
                elif word in ("EXEC", "EXECUTE") and verb == "INSERT" and wants_query:
                    starts_new = False
                elif tt == T.TABLE and verb in ("DECLARE",):
                    starts_new = False
                elif word in ("IF",) and prev.token_type in (T.DROP, T.CREATE) or word == "EXISTS":
                    starts_new = False
            if starts_new:
                close()
                cur.append(tok)
                verb = word
                wants_query = word in ("INSERT", "WITH", "CREATE", "REPLACE", "MERGE", "CACHE")
                if _is_routine(toks[i:i + 6]):
                    routine = True
                continue
            if tt in (T.SELECT, T.VALUES) and verb != "WITH":
                wants_query = False
            if verb == "WITH" and tt in (T.SELECT, T.INSERT, T.UPDATE, T.DELETE, T.MERGE) and \
                    prev.token_type == T.R_PAREN:
                wants_query = False
        cur.append(tok)
    close()
    return chunks


#: Statements within which a control word never starts a new statement.
CONTROL_NO_SPLIT: set[str] = set()


def split_body(text: str, dialect: str) -> list[Chunk]:
    """The statements inside a routine's body, control flow cut out (keyword mode)."""
    return split_statements(text, dialect, keyword_mode=True)
