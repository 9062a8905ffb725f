"""The 2048 game (pure logic): a seeded board, moves, and the HUD-style reward.

The reward is the largest tile relative to the target on a log scale, in [0, 1]:
log2(max tile) / log2(target), so every doubling is equal progress (2 → 0.17 of 64,
64 → 1.0). Boards are deterministic for a seed, so a task always starts the same.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

SIZE = 4
DIRECTIONS = ("up", "down", "left", "right")


def _merge_row(row: list[int]) -> tuple[list[int], int]:
    """Slides one row to the left, merging equal neighbours once; returns (row, score)."""
    tiles = [t for t in row if t]
    merged: list[int] = []
    score = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            merged.append(tiles[i] * 2)
            score += tiles[i] * 2
            i += 2
        else:
            merged.append(tiles[i])
            i += 1
    return merged + [0] * (len(row) - len(merged)), score


@dataclass
class Game:
    seed: int = 0
    target: int = 64
    board: list[list[int]] = field(default_factory=list)
    score: int = 0
    moves: int = 0

    def __post_init__(self) -> None:
        if self.target < 4 or self.target & (self.target - 1):
            raise ValueError("target must be a power of two >= 4")
        self._rng = random.Random(self.seed)
        if not self.board:
            self.board = [[0] * SIZE for _ in range(SIZE)]
            self._spawn()
            self._spawn()

    def _spawn(self) -> None:
        empty = [(r, c) for r in range(SIZE) for c in range(SIZE) if not self.board[r][c]]
        if empty:
            r, c = self._rng.choice(empty)
            self.board[r][c] = 4 if self._rng.random() < 0.1 else 2

    def move(self, direction: str) -> bool:
        """Plays a move; False when it changes nothing (the board stays as it was)."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {', '.join(DIRECTIONS)}")
        rotated = self._rotate_in(direction)
        moved = [_merge_row(row) for row in rotated]
        new = self._rotate_out([row for row, _ in moved], direction)
        if new == self.board:
            return False
        self.board = new
        self.score += sum(score for _, score in moved)
        self.moves += 1
        self._spawn()
        return True

    def _rotate_in(self, direction: str) -> list[list[int]]:
        b = self.board
        if direction == "left":
            return [list(row) for row in b]
        if direction == "right":
            return [list(reversed(row)) for row in b]
        columns = [[b[r][c] for r in range(SIZE)] for c in range(SIZE)]
        return columns if direction == "up" else [list(reversed(col)) for col in columns]

    @staticmethod
    def _rotate_out(rows: list[list[int]], direction: str) -> list[list[int]]:
        if direction == "left":
            return rows
        if direction == "right":
            return [list(reversed(row)) for row in rows]
        columns = rows if direction == "up" else [list(reversed(col)) for col in rows]
        return [[columns[c][r] for c in range(SIZE)] for r in range(SIZE)]

    @property
    def max_tile(self) -> int:
        return max(max(row) for row in self.board)

    def can_move(self) -> bool:
        for r in range(SIZE):
            for c in range(SIZE):
                v = self.board[r][c]
                if not v or (c + 1 < SIZE and self.board[r][c + 1] == v):
                    return True
                if r + 1 < SIZE and self.board[r + 1][c] == v:
                    return True
        return False

    def reward(self) -> float:
        return min(1.0, math.log2(self.max_tile) / math.log2(self.target))

    def render(self) -> str:
        width = max(4, len(str(self.max_tile)))
        rows = [" ".join(str(v or ".").rjust(width) for v in row) for row in self.board]
        status = f"max tile {self.max_tile}, target {self.target}, moves {self.moves}"
        if not self.can_move():
            status += ", no moves left"
        return "\n".join([*rows, status])
