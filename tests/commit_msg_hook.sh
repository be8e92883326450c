#!/bin/sh
# The commit-msg hook (scripts/hooks/commit-msg): subjects of 72 characters pass, 73 fail,
# characters count as characters (not bytes), an empty subject and a body without the blank
# line fail, and git's comment lines are not the subject.
hook="$1"
msg=$(mktemp)
trap 'rm -f "$msg"' EXIT
fails=0
check() { # expected status, description, message text
    printf '%b' "$3" > "$msg"
    LC_ALL=C sh "$hook" "$msg" 2>/dev/null
    got=$?
    if [ "$got" -ne "$1" ]; then
        echo "FAIL: $2: status $got, expected $1"
        fails=$((fails + 1))
    fi
}
x72=$(printf 'x%.0s' $(seq 72))
check 0 "72 characters" "$x72\n\nbody\n"
check 1 "73 characters" "${x72}y\n"
check 0 "72 characters with accents (more bytes)" "été $(printf 'x%.0s' $(seq 68))\n"
check 1 "an empty subject" "\n\nbody\n"
check 1 "a body right after the subject" "subject\nbody\n"
check 0 "git's comment lines" "# Please enter the commit message\nsubject\n\nbody\n# comment\n"
[ "$fails" -eq 0 ] && echo "commit-msg hook: 6 cases ok"
exit "$fails"
